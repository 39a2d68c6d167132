"""RocketMQ's ``TransactionListenerImpl`` of its transaction example, as the demo's listener:
local transactions answer UNKNOW, and a back-check answers by the transaction's ``value % 3``."""

from __future__ import annotations

import threading
from typing import Any

from halfmoon_client import LocalTransactionState, Message, MessageView, TransactionListener

STATUS_ANSWERS = {
    0: LocalTransactionState.UNKNOW,
    1: LocalTransactionState.COMMIT_MESSAGE,
    2: LocalTransactionState.ROLLBACK_MESSAGE,
}


class DemoTransactionListener(TransactionListener):
    """RocketMQ's ``TransactionListenerImpl``: an AtomicInteger hands out values; the status
    ``value % 3`` decides the back-check's answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next_value = 0
        self.local_trans: dict[str, int] = {}  # transaction id -> value

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:  # transactionIndex.getAndIncrement()
            value = self._next_value
            self._next_value += 1
            self.local_trans[str(msg.transaction_id)] = value
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        with self._lock:
            value = self.local_trans.get(str(msg_view.transaction_id))
        if value is None:
            return LocalTransactionState.COMMIT_MESSAGE
        return STATUS_ANSWERS[value % 3]

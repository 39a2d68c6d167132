"""``TransactionListener``: your local transaction and its back-check (RocketMQ
``TransactionListener``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from halfmoon_client.messages import Message, MessageView
from halfmoon_client.states import LocalTransactionState

CheckCallback = Callable[[MessageView, LocalTransactionState], None]
"""Called with (the back-check's message, the answered state) after each back-check."""


class TransactionListener(ABC):
    """Your local transaction and its back-check (RocketMQ ``TransactionListener``).

    ``check_local_transaction`` may be called from several threads at once (one per
    back-check), and concurrently with ``execute_local_transaction``: keep shared state
    thread-safe.
    """

    @abstractmethod
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction after the half message was stored.

        Args:
            msg: the message sent, with ``msg.transaction_id`` set.
            arg: the ``arg`` given to ``send_message_in_transaction``.

        Returns:
            COMMIT_MESSAGE, ROLLBACK_MESSAGE, or UNKNOW to let the back-check decide. An
            exception counts as UNKNOW.
        """

    @abstractmethod
    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        """Answer a back-check: what became of the local transaction of ``msg_view``?

        Args:
            msg_view: the half message, with ``transaction_id`` and ``check_times`` set.

        Returns:
            COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW (ask again later). An exception counts
            as UNKNOW.
        """

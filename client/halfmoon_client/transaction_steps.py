"""The steps every way of sending a transactional message shares (alone, in a batch, gathered
in linger mode): the half message's body, the local transaction's run, the result."""

from __future__ import annotations

import logging
from typing import Any

from halfmoon_client.errors import HalfmoonError
from halfmoon_client.listener import TransactionListener
from halfmoon_client.messages import Message, SendResult, TransactionSendResult
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transport import TransactionEnd

logger = logging.getLogger("halfmoon.client")


def half_body(producer_group: str, msg: Message) -> dict[str, Any]:
    """The body of ``POST /transactions`` (and of a ``/transactions/batch`` item)."""
    body: dict[str, Any] = {"producer_group": producer_group, **msg.to_json()}
    if msg.msg_id is not None:
        body["msg_id"] = msg.msg_id
    if msg.check_immunity_seconds is not None:
        body["check_immunity_seconds"] = msg.check_immunity_seconds
    return body


def normal_body(producer_group: str, msg: Message) -> dict[str, Any]:
    """The body of ``POST /messages`` (and of a ``/messages/batch`` item), without a delivery
    time."""
    body: dict[str, Any] = {"producer_group": producer_group, **msg.to_json()}
    if msg.msg_id is not None:
        body["msg_id"] = msg.msg_id
    if msg.message_group:
        body["message_group"] = msg.message_group
    return body


def local_transaction_run(
    listener: TransactionListener, msg: Message, arg: Any, half: dict[str, Any]
) -> tuple[LocalTransactionState, BaseException | None, TransactionEnd]:
    """Run the local transaction of the stored half message ``half`` (RocketMQ
    ``executeLocalTransaction``, ``msg.transaction_id`` set first); an exception or an
    answer that is no state counts as UNKNOW.

    Returns:
        (the state, the exception raised or None, the end to report).
    """
    transaction_id = half["transaction_id"]
    msg.transaction_id = transaction_id
    local_exception: BaseException | None = None
    try:
        state = LocalTransactionState.coerce(listener.execute_local_transaction(msg, arg))
    except Exception as exc:  # RocketMQ catches Throwable: the back-check will decide
        logger.info("execute_local_transaction raised for %s", transaction_id, exc_info=True)
        state = LocalTransactionState.UNKNOW
        local_exception = exc
    remark = None
    if local_exception is not None:
        remark = f"executeLocalTransactionBranch exception: {local_exception!r}"[:1024]
    return state, local_exception, TransactionEnd(transaction_id, state, remark)


def transaction_result(
    status: int,
    half: dict[str, Any],
    state: LocalTransactionState,
    local_exception: BaseException | None,
    end: dict[str, Any],
    end_error: HalfmoonError | None,
) -> TransactionSendResult:
    """The ``TransactionSendResult`` of a half send answered ``status`` / ``half``, a
    local transaction answering ``state``, and an end answered ``end`` (or failed)."""
    if end_error is not None:
        logger.warning(
            "local transaction %s is %s, but end failed: %s",
            half["transaction_id"],
            state.value,
            end_error,
        )
    return TransactionSendResult(
        send_status=half.get("status", "SEND_OK"),
        msg_id=half["msg_id"],
        transaction_id=half["transaction_id"],
        commit_log_offset=half["commit_log_offset"],
        half_queue_offset=half["half_queue_offset"],
        created=status == 201,
        local_transaction_state=state,
        state=end.get("state"),
        queue_id=end.get("queue_id"),
        queue_offset=end.get("queue_offset"),
        local_exception=local_exception,
        end_error=end_error,
    )


def send_result(out: dict[str, Any]) -> SendResult:
    """A ``SendResult`` from the answer of ``POST /messages`` (or a ``/messages/batch`` item)."""
    return SendResult(
        send_status=out["status"],
        msg_id=out["msg_id"],
        topic=out["topic"],
        queue_id=out["queue_id"],
        queue_offset=out["queue_offset"],
        commit_log_offset=out["commit_log_offset"],
        delivery_timestamp=out.get("delivery_timestamp"),
        state=out.get("state"),
        recall_handle=out.get("recall_handle"),
    )

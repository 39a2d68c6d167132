"""The messages the client sends and receives, and the results of a send (RocketMQ
``Message``, ``MessageExt``/``MessageView``, ``SendResult``, ``TransactionSendResult``).
Times are ms since the Unix epoch."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from halfmoon_client.errors import HalfmoonError
from halfmoon_client.states import LocalTransactionState


def _body_bytes(data: Mapping[str, Any]) -> bytes:
    if data.get("body") is not None:
        return str(data["body"]).encode("utf-8")
    if data.get("body_base64") is not None:
        return base64.b64decode(data["body_base64"])
    return b""


@dataclass
class Message:
    """A message to send (RocketMQ ``org.apache.rocketmq.common.message.Message``).

    Args:
        topic: a user topic, e.g. ``"TranTest"``.
        body: ``str`` is sent as UTF-8 text (``body``), ``bytes`` as ``body_base64``.
        tags: one tag, e.g. ``"TagA"``.
        keys: a key, or several (a sequence is joined with spaces, RocketMQ's KEY_SEPARATOR).
        properties: user properties, string to string.
        msg_id: your own message id (= transaction id); sending the same id again for the
            same producer group stores nothing new (idempotent). None: the broker makes one.
        check_immunity_seconds: delay of the first back-check (RocketMQ
            CHECK_IMMUNITY_TIME_IN_SECONDS); at most 3600.
        message_group: a FIFO message's group (RocketMQ 5 ``messageGroup``; 1-64 characters):
            a group's messages share one queue and reach a FIFO consumer group in send order.
            Sent by ``send`` (not with a delivery time, not in a transaction).

    After ``send_message_in_transaction`` succeeds, ``transaction_id`` holds the transaction
    id, as RocketMQ's ``msg.setTransactionId`` does before ``executeLocalTransaction``.
    """

    topic: str
    body: bytes | str
    tags: str = ""
    keys: str | Sequence[str] = ""
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str | None = None
    check_immunity_seconds: int | None = None
    transaction_id: str | None = None
    message_group: str = ""

    @property
    def keys_str(self) -> str:
        """``keys`` as the broker stores them: one string, keys separated by spaces."""
        if isinstance(self.keys, str):
            return self.keys
        return " ".join(self.keys)

    @property
    def body_bytes(self) -> bytes:
        """The body as bytes (a ``str`` body encoded as UTF-8)."""
        return self.body.encode("utf-8") if isinstance(self.body, str) else bytes(self.body)

    def to_json(self) -> dict[str, Any]:
        """The message fields of a send request (topic, tags, keys, body or body_base64,
        properties)."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "tags": self.tags,
            "keys": self.keys_str,
            "properties": dict(self.properties),
        }
        if isinstance(self.body, str):
            out["body"] = self.body
        else:
            out["body_base64"] = base64.b64encode(bytes(self.body)).decode("ascii")
        return out


@dataclass(frozen=True)
class MessageView:
    """A message as the broker shows it: received by a consumer, or in a back-check
    (RocketMQ ``MessageExt`` / RocketMQ 5 ``MessageView``).

    ``body`` is always bytes; ``text`` decodes it as UTF-8. Fields that one source does not
    carry are None: ``receipt_handle``, ``delivery_attempt``, ``queue_id``, ``queue_offset``
    and ``store_timestamp`` come with received messages; ``transaction_id``,
    ``producer_group``, ``check_times`` (counting this check, 1 on the first),
    ``commit_log_offset`` and ``half_queue_offset`` with back-checks. Timestamps are ms since
    the Unix epoch. ``message_group`` is a FIFO message's group ("" for none).
    """

    msg_id: str
    topic: str
    body: bytes
    tags: str = ""
    keys: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    transaction_id: str | None = None
    producer_group: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    born_timestamp: int | None = None
    store_timestamp: int | None = None
    delivery_attempt: int | None = None
    receipt_handle: str | None = None
    check_times: int | None = None
    commit_log_offset: int | None = None
    half_queue_offset: int | None = None
    message_group: str = ""

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    @property
    def key_list(self) -> list[str]:
        """``keys`` split on spaces."""
        return self.keys.split()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MessageView:
        """Parse a received message or a back-check body of api-v1.

        Raises:
            KeyError, ValueError: ``data`` lacks ``msg_id`` or ``topic``, or its base64 is bad.
        """
        return cls(
            msg_id=str(data["msg_id"]),
            topic=str(data["topic"]),
            body=_body_bytes(data),
            tags=str(data.get("tags") or ""),
            keys=str(data.get("keys") or ""),
            properties={str(k): str(v) for k, v in (data.get("properties") or {}).items()},
            transaction_id=data.get("transaction_id"),
            producer_group=data.get("producer_group"),
            queue_id=data.get("queue_id"),
            queue_offset=data.get("queue_offset"),
            born_timestamp=data.get("born_timestamp"),
            store_timestamp=data.get("store_timestamp"),
            delivery_attempt=data.get("delivery_attempt"),
            receipt_handle=data.get("receipt_handle"),
            check_times=data.get("check_times"),
            commit_log_offset=data.get("commit_log_offset"),
            half_queue_offset=data.get("half_queue_offset"),
            message_group=str(data.get("message_group") or ""),
        )


@dataclass(frozen=True)
class SendResult:
    """Result of a normal send (RocketMQ ``SendResult``).

    A message sent for a later time (``send(msg, deliver_at=...)`` or ``delay_level=``) that
    waits for it also has ``delivery_timestamp`` (when it is due, ms), ``state``
    (``"SCHEDULED"``; a resend by ``msg_id``: its state now, ``DELIVERED`` or ``RECALLED``)
    and ``recall_handle`` (what ``recall`` takes); its ``queue_id`` is the queue it will be
    delivered to, its ``queue_offset`` and ``commit_log_offset`` where it waits on the
    broker's timer topic. None for a message sent for now (or a time already past).
    """

    send_status: str
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    delivery_timestamp: int | None = None
    state: str | None = None
    recall_handle: str | None = None


@dataclass(frozen=True)
class TransactionSendResult:
    """Result of ``send_message_in_transaction`` (RocketMQ ``TransactionSendResult``).

    Attributes:
        send_status: ``"SEND_OK"`` (a failed half send raises instead).
        msg_id, transaction_id: equal (RocketMQ's UNIQ_KEY).
        commit_log_offset, half_queue_offset: where the half message is stored.
        created: False when the msg_id had been sent before (nothing new was stored).
        local_transaction_state: what ``execute_local_transaction`` answered (UNKNOW if it
            raised or returned something else).
        state: the transaction's state after end: ``COMMITTED``, ``ROLLED_BACK``,
            ``PREPARED`` (unknown: the back-check will ask) or ``DISCARDED``; None if end failed.
        queue_id, queue_offset: where the committed message went, when ``COMMITTED``.
        local_exception: the exception ``execute_local_transaction`` raised, if any.
        end_error: the error of the end call, if it failed. As in RocketMQ, that does not
            raise: the transaction stays PREPARED and the back-check resolves it.
    """

    send_status: str
    msg_id: str
    transaction_id: str
    commit_log_offset: int
    half_queue_offset: int
    created: bool
    local_transaction_state: LocalTransactionState
    state: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    local_exception: BaseException | None = None
    end_error: HalfmoonError | None = None

"""Protocol buffers of ``apache.rocketmq.v2`` to and from Halfmoon's domain: messages as the
clients read them, the route's endpoints, client kinds, and ``broker.errors`` as status codes
(the one place errors are mapped; RocketMQ proxy ``ResponseBuilder``).
"""

from __future__ import annotations

import hashlib
import logging
import socket
from dataclasses import dataclass
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.constants import (
    PROPERTY_TIMER_DELIVER_MS,
    RESERVED_PROPERTIES,
    SYS_FLAG_TRANSACTION_PREPARED_TYPE,
)
from broker.errors import (
    Conflict,
    Forbidden,
    HalfmoonError,
    InvalidInput,
    NotFound,
    TooLarge,
    TransactionAlreadyResolved,
    Unauthorized,
)
from broker.models import ClientConnection, Message
from broker.plumbing.database_status import DATABASE_UNAVAILABLE_ERRORS
from broker.rules.filters import FilterExpression
from broker.rules.timers import timestamp_ms as delivery_ms
from broker.services.consumption.subscriptions import subscription_filter

logger = logging.getLogger("halfmoon.grpc")

Code = pb.Code


def status(code: int, message: str = "OK") -> pb.Status:
    """A ``Status`` with ``code`` (``Code``) and ``message``."""
    return pb.Status(code=code, message=message)


OK = status(Code.OK)

# Error codes (``broker.errors``' ``code``) with a RocketMQ code of their own.
_CODES: dict[str, int] = {
    "topic_not_found": Code.TOPIC_NOT_FOUND,
    "consumer_group_not_found": Code.CONSUMER_GROUP_NOT_FOUND,
    "invalid_receipt_handle": Code.INVALID_RECEIPT_HANDLE,
    "message_not_found": Code.MESSAGE_NOT_FOUND,
    "message_too_large": Code.MESSAGE_BODY_TOO_LARGE,
    "properties_too_large": Code.MESSAGE_PROPERTIES_TOO_LARGE,
    "duplicate_msg_id": Code.ILLEGAL_MESSAGE_ID,
    "invalid_msg_id": Code.ILLEGAL_MESSAGE_ID,
    "reserved_property": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "invalid_properties": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "illegal_filter_expression": Code.ILLEGAL_FILTER_EXPRESSION,
    "illegal_delivery_time": Code.ILLEGAL_DELIVERY_TIME,
    "message_type_conflict": Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    "message_type_mismatch": Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,  # the proxy's validator
    "invalid_recall_handle": Code.BAD_REQUEST,
    "scheduled_message_not_found": Code.NOT_FOUND,  # not MESSAGE_NOT_FOUND: the clients take it as OK
    "recall_too_late": Code.PRECONDITION_FAILED,
}

# The rest by error class, most specific first.
_CLASSES: tuple[tuple[type[HalfmoonError], int], ...] = (
    (Unauthorized, Code.UNAUTHORIZED),
    (TransactionAlreadyResolved, Code.PRECONDITION_FAILED),
    (Forbidden, Code.FORBIDDEN),
    (NotFound, Code.NOT_FOUND),
    (TooLarge, Code.PAYLOAD_TOO_LARGE),
    (Conflict, Code.PRECONDITION_FAILED),
    (InvalidInput, Code.BAD_REQUEST),
)


def error_status(exc: BaseException, *, call: str = "") -> pb.Status:
    """The ``Status`` answering ``exc``: a ``broker.errors`` error by its code, else by its
    class (``_CODES``, ``_CLASSES``; 5xx errors INTERNAL_SERVER_ERROR), its message kept;
    the database unreachable (``DATABASE_UNAVAILABLE_ERRORS``: stopped, or no primary during a
    failover) HA_NOT_AVAILABLE, which RocketMQ's clients retry, logged as a warning without a
    traceback; anything else INTERNAL_ERROR, logged with its traceback on ``halfmoon.grpc``
    (``call`` names the gRPC call in the log line)."""
    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS):
        logger.warning("gRPC %s: the database does not answer: %s", call or "call", exc)
        return status(Code.HA_NOT_AVAILABLE, "The database does not answer; retry shortly.")
    if isinstance(exc, HalfmoonError):
        code = _CODES.get(exc.code)
        if code is None and isinstance(exc, InvalidInput):
            fields = exc.details.get("fields", {})
            if "invisible_duration_ms" in fields:
                code = Code.ILLEGAL_INVISIBLE_TIME
        if code is None:
            code = next((c for cls, c in _CLASSES if isinstance(exc, cls)), None)
        if code is None:
            code = Code.INTERNAL_SERVER_ERROR if exc.status_code >= 500 else Code.BAD_REQUEST
        return status(code, exc.message)
    logger.error("gRPC %s failed", call or "call", exc_info=exc)
    return status(Code.INTERNAL_ERROR, f"Internal error: {type(exc).__name__}.")


def timestamp_ms(ms: int) -> Timestamp:
    """A protobuf ``Timestamp`` of ``ms`` milliseconds since the epoch."""
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def duration_ms(value: Duration) -> int:
    """A protobuf ``Duration`` in whole milliseconds."""
    return value.seconds * 1000 + value.nanos // 1_000_000


_FILTER_TYPES = {pb.FilterType.SQL: "SQL92"}  # TAG and FILTER_TYPE_UNSPECIFIED: TAG


def filter_of(expression: pb.FilterExpression) -> FilterExpression:
    """A gRPC ``FilterExpression`` (``{type: TAG | SQL, expression}``, sent by the clients in
    each ReceiveMessage and in their telemetry subscriptions) as the broker's filter; an unset
    one is TAG ``*`` (the clients' default).

    Raises:
        InvalidInput: ``illegal_filter_expression`` (answered ILLEGAL_FILTER_EXPRESSION).
    """
    kind = _FILTER_TYPES.get(expression.type, "TAG")
    return subscription_filter(type=kind, expression=expression.expression or "*")


def endpoints_of(endpoint: str) -> pb.Endpoints:
    """``Endpoints`` for ``endpoint`` ("host:port", "[v6]:port"): scheme IPv4, IPv6 or
    DOMAIN_NAME as the host is written (the clients connect to what they are given)."""
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    scheme = pb.AddressScheme.DOMAIN_NAME
    for family, name in (
        (socket.AF_INET, pb.AddressScheme.IPv4),
        (socket.AF_INET6, pb.AddressScheme.IPv6),
    ):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        scheme = name
        break
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


_KINDS = {
    pb.ClientType.PRODUCER: ClientConnection.Kind.PRODUCER,
    pb.ClientType.PUSH_CONSUMER: ClientConnection.Kind.PUSH_CONSUMER,
    pb.ClientType.SIMPLE_CONSUMER: ClientConnection.Kind.SIMPLE_CONSUMER,
}


def client_kind(client_type: int) -> str:
    """The ``ClientConnection.Kind`` of a ``ClientType`` (OTHER for the rest)."""
    return _KINDS.get(client_type, ClientConnection.Kind.OTHER)


def language_name(ua: pb.UA | None, header: str) -> str:
    """A client's language: its settings' ``user_agent.language`` name (``PYTHON``,
    ``NODE_JS``), else its ``x-mq-language`` header."""
    if ua is not None and ua.language:
        return pb.Language.Name(ua.language)
    return header


def body_digest(body: bytes) -> pb.Digest:
    """The body's MD5 as upper-case hex (what the proxy writes; both clients check it)."""
    return pb.Digest(type=pb.DigestType.MD5, checksum=hashlib.md5(body).hexdigest().upper())  # noqa: S324 - a checksum, as RocketMQ's


def message_proto(
    message: Message,
    *,
    topic: str | None = None,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_duration_ms: int | None = None,
) -> pb.Message:
    """``message`` as a client reads it: topic (``topic`` if given: a half message's real
    topic), body, user properties (the broker's own keys left out), and system properties:
    message id (its msg_id), tag, keys, MD5 body digest, encoding IDENTITY, message type
    (TRANSACTION for a half message or one delivered by a commit; DELAY, with its
    ``delivery_timestamp``, for a delay message the timer delivered, which carries
    ``TIMER_DELIVER_MS``, as RocketMQ's proxy answers; else NORMAL), born and store
    timestamps, queue id and offset, and when delivered the receipt handle and delivery attempt.
    """
    body = bytes(message.body)
    due = _delivered_at(message)
    system = pb.SystemProperties(
        message_id=message.msg_id,
        body_digest=body_digest(body),
        body_encoding=pb.Encoding.IDENTITY,
        message_type=_message_type(message, due),
        born_timestamp=timestamp_ms(message.born_timestamp),
        born_host="",
        store_timestamp=timestamp_ms(message.store_timestamp),
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
    )
    if system.message_type == pb.MessageType.DELAY and due is not None:
        system.delivery_timestamp.CopyFrom(timestamp_ms(due))
    if message.tags:
        system.tag = message.tags
    if message.keys:
        system.keys.extend(message.keys.split())
    if receipt_handle:
        system.receipt_handle = receipt_handle
    if delivery_attempt:
        system.delivery_attempt = delivery_attempt
    if invisible_duration_ms is not None:
        system.invisible_duration.FromMilliseconds(invisible_duration_ms)
    properties = {k: v for k, v in message.properties.items() if k not in RESERVED_PROPERTIES}
    return pb.Message(
        topic=pb.Resource(name=topic or message.topic),
        user_properties=properties,
        system_properties=system,
        body=body,
    )


def _message_type(message: Message, due: int | None) -> int:
    """TRANSACTION for a half message or one a commit delivered, DELAY for a delay message the
    timer delivered (``due`` its time), else NORMAL."""
    if (
        message.sys_flag == SYS_FLAG_TRANSACTION_PREPARED_TYPE
        or message.prepared_transaction_offset is not None
    ):
        return pb.MessageType.TRANSACTION
    return pb.MessageType.DELAY if due is not None else pb.MessageType.NORMAL


def _delivered_at(message: Message) -> int | None:
    """The due time (ms) of a delay message the timer delivered (its ``TIMER_DELIVER_MS``), or
    None for any other message."""
    value = (message.properties or {}).get(PROPERTY_TIMER_DELIVER_MS)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Outgoing:
    """A message a client sends (``SendMessageRequest.messages`` item), decoded."""

    topic: str
    msg_id: str
    message_type: int
    body: bytes
    tags: str
    keys: str
    properties: dict[str, str]
    check_immunity_seconds: int | None
    delivery_timestamp: int | None = None
    """When a DELAY message is due (ms since the epoch), from ``delivery_timestamp``."""

    def send_arguments(self) -> dict[str, Any]:
        """The keyword arguments ``message_send`` and ``transaction_prepare`` share; the body
        is kept as text when it is UTF-8 (the API and the console show it so)."""
        try:
            self.body.decode("utf-8")
            is_text = True
        except UnicodeDecodeError:
            is_text = False
        return {
            "topic": self.topic,
            "body": self.body,
            "body_is_text": is_text,
            "tags": self.tags,
            "keys": self.keys,
            "properties": self.properties,
            "msg_id": self.msg_id,
        }


def outgoing_of(message: pb.Message) -> Outgoing:
    """Decode a message a client sends: GZIP bodies are inflated (the Python client compresses
    none; a body sent GZIP is stored as sent before compression); keys joined by spaces;
    ``orphaned_transaction_recovery_duration`` in whole seconds (the check immunity) when
    set; ``delivery_timestamp`` in ms when set (``broker.rules.timers.timestamp_ms``: seconds
    above 1e11 are read as ms, the Python client 5.1.2 writing its ms there).

    Raises:
        InvalidInput: a GZIP body that does not inflate.
    """
    system = message.system_properties
    body = message.body
    if system.body_encoding == pb.Encoding.GZIP:
        import zlib

        try:
            body = zlib.decompress(body, wbits=47)
        except zlib.error as exc:
            raise InvalidInput("The GZIP body does not inflate.", code="invalid_body") from exc
    immunity = None
    if system.HasField("orphaned_transaction_recovery_duration"):
        immunity = system.orphaned_transaction_recovery_duration.seconds
    due = None
    if system.HasField("delivery_timestamp"):
        due = delivery_ms(system.delivery_timestamp.seconds, system.delivery_timestamp.nanos)
    return Outgoing(
        topic=message.topic.name,
        msg_id=system.message_id,
        message_type=system.message_type,
        body=body,
        tags=system.tag if system.HasField("tag") else "",
        keys=" ".join(k for k in system.keys if k),
        properties=dict(message.user_properties),
        check_immunity_seconds=immunity,
        delivery_timestamp=due,
    )

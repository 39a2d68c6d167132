"""Normal (non-transactional) sends (RocketMQ SendMessageProcessor)."""

from __future__ import annotations

import zlib
from typing import Any

from django.db import connection, transaction

from broker.constants import MSG_ID_PATTERN, PROPERTY_PRODUCER_GROUP, PROPERTY_UNIQ_KEY
from broker.errors import Forbidden, InvalidInput, not_found
from broker.lookups import topic_by_name
from broker.models import Message, Topic
from broker.rules.topics import is_system_topic
from broker.services.commitlog.storage import message_new, messages_store, new_msg_id
from broker.services.commitlog.validation import message_type_check, message_validate


def producer_topic_get(name: str) -> Topic:
    """The user topic ``name`` a producer may send to.

    Raises:
        Forbidden: ``system_topic`` (RMQ_SYS_*, TRANS_CHECK_MAX_TIME_TOPIC, %RETRY%*, %DLQ%*).
        NotFound: ``topic_not_found``.
    """
    if is_system_topic(name):
        raise Forbidden(f"Producers may not send to the system topic {name}.", code="system_topic")
    topic = topic_by_name(name)
    if topic is None or topic.system:
        raise not_found("topic", name)
    return topic


def msg_id_validate(msg_id: str) -> None:
    """Check a message id a producer made itself (a RocketMQ 5 client's, 34 upper-case hex
    characters): 1 to 64 characters of ``A-Z a-z 0-9 _ . : -`` (``MSG_ID_PATTERN``).

    Raises:
        InvalidInput: ``invalid_msg_id``.
    """
    if not MSG_ID_PATTERN.match(msg_id):
        raise InvalidInput(
            "A message id is 1 to 64 characters of A-Z a-z 0-9 _ . : -.",
            code="invalid_msg_id",
            details={"msg_id": msg_id},
        )


def queue_select(msg_id: str, queue_nums: int) -> int:
    """The queue a message goes to: spread evenly by its msg_id (CRC32), stable for retries."""
    return zlib.crc32(msg_id.encode()) % queue_nums


def message_plan(
    *,
    topic: str,
    body: bytes,
    body_is_text: bool = True,
    tags: str = "",
    keys: str = "",
    properties: dict[str, Any] | None = None,
    producer_group: str = "",
    msg_id: str | None = None,
    delivery_timestamp: int | None = None,
) -> Message:
    """Check a normal message and build it, unsaved, with its msg_id (UNIQ_KEY: ``msg_id``,
    else a new one) and its queue (``queue_select``): every rule of a send that needs no write
    (``message_send``'s arguments and errors). ``delivery_timestamp`` (ms) marks a DELAY
    message: only its type is read here (``message_type_check``), its time is
    ``message_send_at``'s."""
    props = message_validate(body=body, properties=properties)
    if msg_id is not None:
        msg_id_validate(msg_id)
    topic_obj = producer_topic_get(topic)
    message_type_check(topic_obj, delivery_timestamp=delivery_timestamp)
    msg_id = msg_id or new_msg_id()
    props[PROPERTY_UNIQ_KEY] = msg_id
    if producer_group:
        props[PROPERTY_PRODUCER_GROUP] = producer_group
    return message_new(
        topic=topic,
        queue_id=queue_select(msg_id, topic_obj.queue_nums),
        msg_id=msg_id,
        body=body,
        body_is_text=body_is_text,
        tags=tags,
        keys=keys,
        properties=props,
        producer_group=producer_group,
    )


def message_send(**send: Any) -> Message:
    """Store a normal message on ``topic``; it is visible to consumers at once.

    Args:
        send: ``message_plan``'s keyword arguments (``topic``, ``body``, ``body_is_text``,
            ``tags``, ``keys``, ``properties``, ``producer_group``, ``msg_id``,
            ``delivery_timestamp`` for a DELAY message due now).

    With ``msg_id`` (a RocketMQ 5 client makes its message ids and resends a failed send with
    the same one), the send is idempotent: a message with that msg_id already stored on the
    same topic by the same producer group is returned and nothing is stored (concurrent sends
    of one msg_id are serialised by a transaction-level advisory lock on it).

    Returns the stored message (``commit_log_offset``, ``queue_id``, ``queue_offset`` set).

    Raises:
        Forbidden, NotFound: see ``producer_topic_get``. TooLarge, InvalidInput: see
        ``message_validate``; ``invalid_msg_id`` (``msg_id_validate``);
        ``message_type_mismatch`` (``message_type_check``: the topic does not accept it).
    """
    message = message_plan(**send)
    if send.get("msg_id") is None:
        messages_store([message])
        return message
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [message.msg_id]
            )
        stored = (
            Message.objects.filter(
                msg_id=message.msg_id, topic=message.topic, producer_group=message.producer_group
            )
            .order_by("commit_log_offset")
            .first()
        )
        if stored is not None:
            return stored
        messages_store([message])
    return message

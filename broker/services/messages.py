"""Normal (non-transactional) sends (RocketMQ SendMessageProcessor)."""

from __future__ import annotations

import zlib
from typing import Any

from broker.constants import PROPERTY_PRODUCER_GROUP, PROPERTY_UNIQ_KEY
from broker.errors import Forbidden, not_found
from broker.lookups import topic_by_name
from broker.models import Message, Topic
from broker.rules.topics import is_system_topic
from broker.services.storage import message_new, messages_store, new_msg_id
from broker.services.validation import message_validate


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
) -> Message:
    """Check a normal message and build it, unsaved, with a new msg_id (UNIQ_KEY) and its
    queue (``queue_select``): every rule of a send that needs no write (``message_send``'s
    arguments and errors)."""
    props = message_validate(body=body, properties=properties)
    topic_obj = producer_topic_get(topic)
    msg_id = new_msg_id()
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
            ``tags``, ``keys``, ``properties``, ``producer_group``).

    Returns the stored message (``commit_log_offset``, ``queue_id``, ``queue_offset`` set).

    Raises:
        Forbidden, NotFound: see ``producer_topic_get``. TooLarge, InvalidInput: see
        ``message_validate``.
    """
    message = message_plan(**send)
    messages_store([message])
    return message

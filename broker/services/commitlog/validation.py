"""Checks every stored message passes, whatever endpoint it came through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.conf import conf
from broker.constants import RESERVED_PROPERTIES
from broker.errors import InvalidInput, TooLarge
from broker.models import Topic
from broker.rules.message_types import (
    MessageTypeConflict,
    TopicMessageType,
    accepted_types,
    message_type_of,
    mismatch_message,
    topic_accepts,
)


def message_validate(*, body: bytes, properties: dict[str, Any] | None) -> dict[str, str]:
    """Check a message's body and user properties against the limits; return the properties.

    Args:
        body: the decoded body, at most ``HALFMOON_MAX_MESSAGE_SIZE`` bytes (RocketMQ
            maxMessageSize, 4 MiB).
        properties: string keys to string values; all keys and values together at most
            ``HALFMOON_MAX_PROPERTIES_SIZE`` bytes of UTF-8 (32 KiB); no key the broker owns
            (``REAL_TOPIC``, ``TRAN_MSG``, ...; RocketMQ Validators reject them too).

    Raises:
        TooLarge: ``message_too_large`` or ``properties_too_large`` (413).
        InvalidInput: ``reserved_property`` or ``invalid_properties`` (400).
    """
    max_body = conf.max_message_size
    if len(body) > max_body:
        raise TooLarge(
            f"The message body is {len(body)} bytes, more than the limit of {max_body} bytes.",
            code="message_too_large",
            details={"size": len(body), "limit": max_body},
        )
    props = properties or {}
    if not isinstance(props, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k for k, v in props.items()
    ):
        raise InvalidInput(
            "Properties must map non-empty string keys to string values.", code="invalid_properties"
        )
    reserved = sorted(set(props) & RESERVED_PROPERTIES)
    if reserved:
        raise InvalidInput(
            f"Properties {', '.join(reserved)} are set by the broker and may not be sent.",
            code="reserved_property",
            details={"properties": reserved},
        )
    size = sum(len(k.encode()) + len(v.encode()) for k, v in props.items())
    max_props = conf.max_properties_size
    if size > max_props:
        raise TooLarge(
            f"The properties are {size} bytes, more than the limit of {max_props} bytes.",
            code="properties_too_large",
            details={"size": size, "limit": max_props},
        )
    return dict(props)


def action_validate(action: str, allowed: Sequence[str]) -> None:
    """Check that ``action`` is one of ``allowed`` (``broker.rules.states.END_ACTIONS`` for an
    end, ``RESOLVING_ACTIONS`` for an operator's resolution).

    Raises:
        InvalidInput: ``invalid_action``, with ``details.action``.
    """
    if action not in allowed:
        raise InvalidInput(
            f"action must be one of {', '.join(allowed)}.",
            code="invalid_action",
            details={"action": action},
        )


def message_type_resolve(
    *, transactional: bool = False, delivery_timestamp: int | None = None, message_group: str = ""
) -> TopicMessageType:
    """The one type of a message (``broker.rules.message_types.message_type_of``: a half
    message, a delivery time in ms, a message group), before any topic is read.

    Raises:
        InvalidInput: ``message_type_conflict`` (two types at once).
    """
    try:
        return message_type_of(
            transactional=transactional,
            delivery_timestamp=delivery_timestamp,
            message_group=message_group,
        )
    except MessageTypeConflict as exc:
        raise InvalidInput(str(exc), code=exc.code) from None


def message_type_check(
    topic: Topic,
    *,
    transactional: bool = False,
    delivery_timestamp: int | None = None,
    message_group: str = "",
) -> TopicMessageType:
    """The type of a message sent to ``topic`` (``broker.rules.message_types.message_type_of``
    of its fields: a half message, a delivery time in ms, a message group), checked against
    the topic's ``message_type``: the one check every send path runs (normal, delay and half
    messages, over HTTP and gRPC), before anything is stored (RocketMQ's proxy
    ``TopicMessageTypeValidator``).

    Raises:
        InvalidInput: ``message_type_conflict`` (two types at once);
            ``message_type_mismatch`` (the topic does not accept the type), ``details``:
            ``topic``, ``topic_message_type``, ``message_type``, ``accepted_message_types``.
    """
    message_type = message_type_resolve(
        transactional=transactional,
        delivery_timestamp=delivery_timestamp,
        message_group=message_group,
    )
    if not topic_accepts(topic.message_type, message_type):
        raise InvalidInput(
            mismatch_message(
                topic=topic.name, topic_type=topic.message_type, message_type=message_type
            ),
            code="message_type_mismatch",
            details={
                "topic": topic.name,
                "topic_message_type": topic.message_type,
                "message_type": str(message_type),
                "accepted_message_types": [str(t) for t in accepted_types(topic.message_type)],
            },
        )
    return message_type

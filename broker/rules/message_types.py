"""Message types as RocketMQ 5 has them: a message is of exactly one type, a topic accepts the
type its ``message.type`` attribute names (or every type, MIXED).

RocketMQ: ``TopicMessageType`` (``common/attribute``), the proxy's ``TopicMessageTypeValidator``
(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE) and ``RouteActivity.parseTopicMessageType`` (a queue's
``accept_message_types``). PRIORITY and LITE are not types Halfmoon knows.
"""

from __future__ import annotations

from broker.rules.choices import TextChoices


class TopicMessageType(TextChoices):
    """A topic's ``message.type`` attribute: the one type its messages have, or MIXED (RocketMQ
    5's compatibility value: every type)."""

    NORMAL = "NORMAL", "NORMAL"
    FIFO = "FIFO", "FIFO"
    DELAY = "DELAY", "DELAY"
    TRANSACTION = "TRANSACTION", "TRANSACTION"
    MIXED = "MIXED", "MIXED (every type)"


MESSAGE_TYPES: tuple[TopicMessageType, ...] = (
    TopicMessageType.NORMAL,
    TopicMessageType.FIFO,
    TopicMessageType.DELAY,
    TopicMessageType.TRANSACTION,
)
"""The types a message may have (every ``TopicMessageType`` but MIXED), in RocketMQ's order."""


class MessageTypeConflict(ValueError):
    """A message whose fields name more than one type (a transactional message with a delivery
    time or a message group, a delay message with a message group)."""

    code = "message_type_conflict"


def message_type_of(
    *, transactional: bool, delivery_timestamp: int | None, message_group: str
) -> TopicMessageType:
    """The one type of a message: TRANSACTION when ``transactional`` (a half message), DELAY
    with a ``delivery_timestamp`` (ms; any value, past ones too), FIFO with a non-empty
    ``message_group``, else NORMAL (RocketMQ's clients: these fields exclude one another).

    Raises:
        MessageTypeConflict: two of them at once.
    """
    named = [
        kind
        for kind, present in (
            (TopicMessageType.TRANSACTION, transactional),
            (TopicMessageType.DELAY, delivery_timestamp is not None),
            (TopicMessageType.FIFO, bool(message_group)),
        )
        if present
    ]
    if len(named) > 1:
        raise MessageTypeConflict(
            f"A message is of one type: it cannot be {' and '.join(named)} at once."
        )
    return named[0] if named else TopicMessageType.NORMAL


def accepted_types(topic_type: str) -> tuple[TopicMessageType, ...]:
    """The message types a topic of ``topic_type`` accepts: every one for MIXED, else its own
    (RocketMQ ``RouteActivity.parseTopicMessageType``)."""
    if topic_type == TopicMessageType.MIXED:
        return MESSAGE_TYPES
    return (TopicMessageType(topic_type),)


def topic_accepts(topic_type: str, message_type: str) -> bool:
    """True when a topic of ``topic_type`` takes a message of ``message_type`` (RocketMQ's
    proxy: the topic's type, or any for MIXED)."""
    return message_type in accepted_types(topic_type)


def mismatch_message(*, topic: str, topic_type: str, message_type: str) -> str:
    """The refusal of a ``message_type`` message on ``topic`` (RocketMQ's proxy says "the
    expected type is X, but actual type is Y")."""
    return (
        f"The topic {topic} accepts {topic_type} messages, not a {message_type} message "
        f"(its message_type can be changed, or the message sent to another topic)."
    )

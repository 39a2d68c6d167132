"""What a stored message is, from where it is stored (pure: no database).

The commit log holds every message the broker stores, not only those consumers receive
(RocketMQ's CommitLog): half messages on ``RMQ_SYS_TRANS_HALF_TOPIC``, Op messages on
``RMQ_SYS_TRANS_OP_HALF_TOPIC``, half messages discarded after the check max on
``TRANS_CHECK_MAX_TIME_TOPIC``, dead letters on ``%DLQ%{group}``, retries on ``%RETRY%{group}``,
delay and timer messages as sent on ``RMQ_SYS_WHEEL_TIMER``, and on user topics the committed
copies of transactional messages (``prepared_transaction_offset`` names their half message)
and normal messages (a delay message's copy the timer delivered among them).
"""

from __future__ import annotations

from enum import StrEnum

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    TIMER_TOPIC,
)


class MessageKind(StrEnum):
    HALF = "half"  # a half message, invisible to consumers until committed
    OP = "op"  # an Op message: the record that a half message was resolved
    DISCARDED = "discarded"  # a half message discarded after the check max
    DEAD_LETTER = "dead_letter"  # a copy moved to %DLQ%{group}
    RETRY = "retry"  # a copy on %RETRY%{group}
    COMMITTED = "committed"  # a transactional message delivered to its topic by its commit
    NORMAL = "normal"  # a message sent without a transaction
    SCHEDULED = "scheduled"  # a delay or timer message as sent, on RMQ_SYS_WHEEL_TIMER


MESSAGE_KIND_TEXT: dict[MessageKind, str] = {
    MessageKind.HALF: "half message",
    MessageKind.OP: "Op message",
    MessageKind.DISCARDED: "discarded half message",
    MessageKind.DEAD_LETTER: "dead letter",
    MessageKind.RETRY: "retry",
    MessageKind.COMMITTED: "committed transactional message",
    MessageKind.NORMAL: "normal message",
    MessageKind.SCHEDULED: "scheduled message as sent",
}
"""Each kind in words, for pages and exports."""


def message_kind(topic: str, prepared_transaction_offset: int | None) -> MessageKind:
    """The kind of a message stored on ``topic``; ``prepared_transaction_offset`` is the commit
    log offset of the half message a committed copy delivers (None for every other message).
    Consumers receive the committed, normal, retry and dead-letter ones
    (``broker.rules.topics.is_undeliverable_topic``)."""
    if topic == HALF_TOPIC:
        return MessageKind.HALF
    if topic == OP_HALF_TOPIC:
        return MessageKind.OP
    if topic == CHECK_MAX_TIME_TOPIC:
        return MessageKind.DISCARDED
    if topic == TIMER_TOPIC:
        return MessageKind.SCHEDULED
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return MessageKind.DEAD_LETTER
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return MessageKind.RETRY
    if prepared_transaction_offset is not None:
        return MessageKind.COMMITTED
    return MessageKind.NORMAL


class DeliveryState(StrEnum):
    """Where one message stands with one consumer group."""

    ACKED = "acked"
    DEAD_LETTERED = "dead_lettered"  # moved to %DLQ%{group} past max_delivery_attempts
    IN_FLIGHT = "in_flight"  # handed out, invisible to the group's other receivers until a time
    REDELIVERY_DUE = "redelivery_due"  # its invisible time is over: the next receive takes it
    WAITING = "waiting"  # not received yet: at or past the group's offset in its queue
    PASSED = "passed"  # behind the group's offset with nothing journalled (skipped, or pruned)
    FILTERED_OUT = "filtered_out"  # the group's filter rejects it: never delivered, consumed


DELIVERY_STATE_TEXT: dict[DeliveryState, str] = {
    DeliveryState.ACKED: "acked",
    DeliveryState.DEAD_LETTERED: "dead-lettered",
    DeliveryState.IN_FLIGHT: "in flight",
    DeliveryState.REDELIVERY_DUE: "due for redelivery",
    DeliveryState.WAITING: "not received yet",
    DeliveryState.PASSED: "passed by the group's offset, never received",
    DeliveryState.FILTERED_OUT: "filtered out by the group's subscription",
}


def delivery_state(
    *,
    last_event: str | None,
    invisible_until: int | None,
    offset_passed: bool,
    now: int,
    filtered_out: bool = False,
) -> DeliveryState:
    """Where a message stands with a consumer group.

    Args:
        last_event: the kind of the group's latest delivery journal entry for the message
            (``DeliveryEvent.Kind``: delivered, acked, dead_lettered), None when none.
        invisible_until: the ``invisible_until_timestamp`` (ms) of the group's ``Delivery`` row
            for it, None when there is none (never taken, acked or dead-lettered).
        offset_passed: the group's offset in the message's queue is past its queue offset.
        now: the clock (ms).
        filtered_out: the group's subscription of the topic rejects the message.

    A ``Delivery`` row decides first (it is what the next receive acts on); then the journal;
    a message nothing journalled is filtered out when the group's filter rejects it (RocketMQ:
    consumed, never delivered), else waiting, or passed when the offset has moved beyond it.
    """
    if invisible_until is not None:
        return DeliveryState.IN_FLIGHT if invisible_until > now else DeliveryState.REDELIVERY_DUE
    if last_event == "acked":
        return DeliveryState.ACKED
    if last_event == "dead_lettered":
        return DeliveryState.DEAD_LETTERED
    if filtered_out and last_event is None:
        return DeliveryState.FILTERED_OUT
    if offset_passed:
        return DeliveryState.PASSED
    return DeliveryState.WAITING

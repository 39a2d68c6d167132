"""What a consumer does to one delivery by its receipt handle, besides the ack: change its
invisible duration (RocketMQ 5 proxy ChangeInvisibleDurationActivity) and forward its message
to the group's dead-letter topic now (ForwardMessageToDeadLetterQueueActivity).

A receipt handle names one hand-out of one ``Delivery`` of one consumer group: it is valid until
the message is acked, delivered again (a new hand-out, a new handle), dead-lettered, or given a
new handle here. Each operation locks the delivery row by its group and handle
(``SELECT ... FOR UPDATE``) before it writes, so a concurrent receive (which skips locked
deliveries), ack or second change sees either the old row or the new one, never both: a message
is never handed out twice, and a superseded handle fails everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from broker.constants import RECEIVE_INVISIBLE_DURATION_MS
from broker.errors import InvalidInput, NotFound, not_found
from broker.lookups import consumer_group_by_name
from broker.models import ConsumerGroup, Delivery
from broker.rules.clock import now_ms
from broker.services.consumption.handouts import Received, receipt_handle_new
from broker.services.consumption.receive import delivery_move_to_dlq, fifo_released

CHANGE_INVISIBLE_DURATION_MS: tuple[int, int] = (0, RECEIVE_INVISIBLE_DURATION_MS[1])
"""Bounds (ms, inclusive) of a new invisible duration: the proxy's ``GrpcValidator`` checks a
ChangeInvisibleDuration against 0 (not the receive's 10 s minimum) and the receive's maximum
(``maxInvisibleTimeMills``, 12 h). 0 makes the message visible again at once: the next receive
of the group delivers it with ``delivery_attempt`` + 1, as a PushConsumer's nack does."""


@dataclass(frozen=True)
class InvisibleChanged(Received):
    """A delivery after its invisible duration changed: the message, its delivery attempt
    (unchanged), the new receipt handle, and when it becomes visible again (ms)."""

    invisible_until_timestamp: int


def _delivery_locked(consumer_group: str, receipt_handle: str) -> tuple[ConsumerGroup, Delivery]:
    """The consumer group and its delivery behind ``receipt_handle``, the delivery locked
    (``SELECT ... FOR UPDATE`` of the delivery row only) with its message loaded. Must run inside
    ``transaction.atomic()``. A delivery that a concurrent receive is handing out again is read
    after that receive commits, with its new handle: the old one is then not found.

    Raises:
        NotFound: ``consumer_group_not_found``; ``invalid_receipt_handle`` (details
            ``consumer_group``, ``receipt_handle``) when the group has no delivery behind the
            handle: unknown, another group's, acked, dead-lettered, or superseded by a
            redelivery or a change of invisible duration.
    """
    group = consumer_group_by_name(consumer_group)
    if group is None:
        raise not_found("consumer_group", consumer_group)
    try:
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("message")
            .get(consumer_group=consumer_group, receipt_handle=receipt_handle)
        )
    except Delivery.DoesNotExist:
        raise NotFound(
            f"Receipt handle {receipt_handle} of consumer group {consumer_group} is unknown, "
            "acked, or was superseded by a redelivery or a new handle.",
            code="invalid_receipt_handle",
            details={"consumer_group": consumer_group, "receipt_handle": receipt_handle},
        ) from None
    return group, delivery


def delivery_invisible_change(
    *, consumer_group: str, receipt_handle: str, invisible_duration_ms: int
) -> InvisibleChanged:
    """Make the delivery behind ``receipt_handle`` invisible to ``consumer_group``'s receivers
    until now + ``invisible_duration_ms`` (ms), under a NEW receipt handle: the old one no longer
    acks, changes or dead-letters it (RocketMQ 5 ChangeInvisibleDurationActivity; its answer
    carries the new handle, which the clients take in place of the old). The delivery attempt is
    unchanged: the redelivery after the new invisible time counts + 1, and past the group's
    ``max_delivery_attempts`` moves the message to ``%DLQ%{group}``. The delivery journal has no
    kind for this and records nothing; the in-flight delivery row shows the new time.

    Args:
        invisible_duration_ms: within ``CHANGE_INVISIBLE_DURATION_MS`` (0 .. 43,200,000).

    Returns:
        ``InvisibleChanged(message, delivery_attempt, receipt_handle=<new>,
        invisible_until_timestamp=<ms>)``.

    Raises:
        InvalidInput: ``invalid_input`` (details ``fields.invisible_duration_ms``) outside the
            bounds.
        NotFound: ``consumer_group_not_found``, ``invalid_receipt_handle``.
    """
    low, high = CHANGE_INVISIBLE_DURATION_MS
    if not low <= invisible_duration_ms <= high:
        raise InvalidInput(
            f"invisible_duration_ms must be between {low} and {high} ms.",
            details={
                "fields": {
                    "invisible_duration_ms": [f"Ensure this value is between {low} and {high}."]
                }
            },
        )
    with transaction.atomic():
        _, delivery = _delivery_locked(consumer_group, receipt_handle)
        delivery.invisible_until_timestamp = now_ms() + invisible_duration_ms
        delivery.receipt_handle = receipt_handle_new()
        delivery.save(update_fields=["invisible_until_timestamp", "receipt_handle"])
    return InvisibleChanged(
        delivery.message,
        delivery.delivery_attempt,
        delivery.receipt_handle,
        delivery.invisible_until_timestamp,
    )


def delivery_dead_letter(*, consumer_group: str, receipt_handle: str) -> None:
    """Move the message behind ``receipt_handle`` to ``%DLQ%{group}`` now, whatever its delivery
    attempt, and delete the delivery (RocketMQ 5 ForwardMessageToDeadLetterQueueActivity: a
    FIFO PushConsumer's message past its max attempts). It is the move of the expiry path
    (``delivery_move_to_dlq``): the same copy, journalled ``dead_lettered`` with the attempt,
    in the same database transaction. In a FIFO consumer group the message group's next message
    may then be taken: the topic's long polls are woken.

    Raises:
        NotFound: ``consumer_group_not_found``, ``invalid_receipt_handle``.
    """
    with transaction.atomic():
        group, delivery = _delivery_locked(consumer_group, receipt_handle)
        delivery_move_to_dlq(delivery, group, now=now_ms()).save()
        if group.fifo:
            fifo_released([delivery.topic])

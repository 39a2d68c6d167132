"""SimpleConsumer receive and ack (RocketMQ 5 ReceiveMessageActivity, AckMessageActivity).

Each consumer group has its own offset per queue (every group sees every visible message);
a message taken by a receive becomes a ``Delivery`` of that group, invisible to the group's
other receivers until its invisible time ends, when it is delivered again with
``delivery_attempt`` + 1, or, past the group's ``max_delivery_attempts``, moved to
``%DLQ%{group}``. The offset advance and the delivery rows commit together, so a crash loses
no message: a taken message is acked, or delivered again.

Every hand-out (each attempt), ack and dead letter is also journalled as a ``DeliveryEvent``
(the delivery journal), in the same database transaction and with one bulk insert per call:
the ``Delivery`` row is deleted on ack, the journal keeps when each consumer group received and
acked each message (the transaction timeline, the archive and the reconciliation read it).
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef

from broker.constants import (
    PROPERTY_DELIVERY_ATTEMPT,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    dlq_topic,
)
from broker.errors import Forbidden
from broker.models import (
    ConsumerGroup,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    now_ms,
)
from broker.rules.topics import is_undeliverable_topic
from broker.selectors import first_or_not_found, topic_get
from broker.services.storage import message_copy


@dataclass(frozen=True)
class Received:
    """One message handed to a receiver, with its receipt handle and attempt number."""

    message: Message
    delivery_attempt: int
    receipt_handle: str


def _new_handle() -> str:
    return secrets.token_urlsafe(24)


def _journal_entry(
    *, group: str, message: Message, kind: str, attempt: int, now: int
) -> DeliveryEvent:
    """The delivery journal row (not saved) saying ``message`` was handed to, acked by or
    dead-lettered for ``group`` at ``now`` (ms), at delivery attempt ``attempt``."""
    return DeliveryEvent(
        consumer_group=group,
        topic=message.topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        commit_log_offset=message.commit_log_offset,
        msg_id=message.msg_id,
        kind=kind,
        delivery_attempt=attempt,
        timestamp=now,
    )


def _dead_letter(delivery: Delivery, group: ConsumerGroup, *, now: int) -> DeliveryEvent:
    """Move a message past its group's max_delivery_attempts to %DLQ%{group} (inside atomic);
    returns its ``dead_lettered`` journal row, for the caller to insert."""
    message = delivery.message
    props = {
        **message.properties,
        PROPERTY_ORIGIN_MESSAGE_ID: message.msg_id,
        PROPERTY_RETRY_TOPIC: message.topic,
        PROPERTY_DELIVERY_ATTEMPT: str(delivery.delivery_attempt),
    }
    message_copy(
        message, topic=dlq_topic(group.name), queue_id=0, properties=props, system_queue_nums=1
    )
    delivery.delete()
    return _journal_entry(
        group=group.name,
        message=message,
        kind=DeliveryEvent.Kind.DEAD_LETTERED,
        attempt=delivery.delivery_attempt,
        now=now,
    )


def _consumer_group_get(name: str) -> ConsumerGroup:
    return first_or_not_found(ConsumerGroup.objects.filter(name=name), "consumer_group", name)


def _queues_with_messages(topic: str, offsets: list[ConsumerOffset]) -> set[int]:
    """The queue ids among ``offsets`` holding a message of ``topic`` at or past the group's
    offset: one statement for all the queues (an ``EXISTS`` probe of the unique (topic,
    queue_id, queue_offset) index per offset row), so a receive reads messages only from the
    queues that have some; an idle topic costs one probe, not one read per queue."""
    if not offsets:
        return set()
    waiting = Message.objects.filter(
        topic=topic, queue_id=OuterRef("queue_id"), queue_offset__gte=OuterRef("offset")
    )
    return set(
        ConsumerOffset.objects.filter(pk__in=[offset.pk for offset in offsets])
        .filter(Exists(waiting))
        .values_list("queue_id", flat=True)
    )


def messages_receive(
    *, consumer_group: str, topic: str, max_messages: int, invisible_duration_ms: int
) -> list[Received]:
    """Take up to ``max_messages`` messages of ``topic`` for ``consumer_group``, once.

    Expired deliveries of the group come first (redelivered, or dead-lettered past
    ``max_delivery_attempts``), then new messages from the group's queue offsets. Queues locked
    by a concurrent receiver of the same group are skipped (``SKIP LOCKED``), so two receivers
    never get the same message at the same time. Each message handed out is journalled as a
    ``DeliveryEvent`` ``delivered`` (with its attempt), each dead letter as ``dead_lettered``.

    Raises:
        NotFound: ``consumer_group_not_found``, ``topic_not_found``.
        Forbidden: ``system_topic``: half and Op messages (RMQ_SYS_*) and discarded ones
            (TRANS_CHECK_MAX_TIME_TOPIC) are never delivered; %DLQ%* and %RETRY%* may be received.
    """
    group = _consumer_group_get(consumer_group)
    if is_undeliverable_topic(topic):
        raise Forbidden(
            f"Consumers may not receive from the system topic {topic}.",
            code="system_topic",
            details={"topic": topic},
        )
    topic_obj = topic_get(topic)
    now = now_ms()
    until = now + invisible_duration_ms
    out: list[Received] = []
    journal: list[DeliveryEvent] = []  # dead letters, then hand-outs
    handed: list[tuple[Message, int]] = []  # (message, delivery attempt)
    with transaction.atomic():
        expired = list(
            # of=self: lock the group's own delivery rows only, not the shared Message rows,
            # or a receiver of one group would make the others skip the same message.
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("message")
            .filter(consumer_group=consumer_group, topic=topic, invisible_until_timestamp__lte=now)
            .order_by("invisible_until_timestamp")[:max_messages]
        )
        for delivery in expired:
            if delivery.delivery_attempt >= group.max_delivery_attempts:
                journal.append(_dead_letter(delivery, group, now=now))
                continue
            delivery.delivery_attempt += 1
            delivery.invisible_until_timestamp = until
            delivery.receipt_handle = _new_handle()
            delivery.save(
                update_fields=["delivery_attempt", "invisible_until_timestamp", "receipt_handle"]
            )
            out.append(
                Received(delivery.message, delivery.delivery_attempt, delivery.receipt_handle)
            )
            handed.append((delivery.message, delivery.delivery_attempt))

        if len(out) < max_messages:
            ConsumerOffset.objects.bulk_create(
                [
                    ConsumerOffset(consumer_group=consumer_group, topic=topic, queue_id=q)
                    for q in range(topic_obj.queue_nums)
                ],
                ignore_conflicts=True,
            )
            offsets = list(
                ConsumerOffset.objects.select_for_update(skip_locked=True).filter(
                    consumer_group=consumer_group, topic=topic
                )
            )
            random.shuffle(offsets)  # no queue starves the others when max_messages is small
            pending = _queues_with_messages(topic, offsets)
            for offset in offsets:
                want = max_messages - len(out)
                if want <= 0:
                    break
                if offset.queue_id not in pending:
                    continue
                batch = list(
                    Message.objects.filter(
                        topic=topic, queue_id=offset.queue_id, queue_offset__gte=offset.offset
                    ).order_by("queue_offset")[:want]
                )
                if not batch:
                    continue
                deliveries = [
                    Delivery(
                        consumer_group=consumer_group,
                        message=m,
                        topic=topic,
                        delivery_attempt=1,
                        invisible_until_timestamp=until,
                        receipt_handle=_new_handle(),
                    )
                    for m in batch
                ]
                Delivery.objects.bulk_create(deliveries)
                offset.offset = batch[-1].queue_offset + 1
                offset.save(update_fields=["offset"])
                out.extend(Received(d.message, 1, d.receipt_handle) for d in deliveries)
                handed.extend((m, 1) for m in batch)
        journal.extend(
            _journal_entry(
                group=consumer_group,
                message=m,
                kind=DeliveryEvent.Kind.DELIVERED,
                attempt=attempt,
                now=now,
            )
            for m, attempt in handed
        )
        DeliveryEvent.objects.bulk_create(journal)
    return out


def messages_ack(
    *, consumer_group: str, receipt_handles: list[str]
) -> tuple[int, list[dict[str, str]]]:
    """Ack the deliveries behind ``receipt_handles`` for ``consumer_group``.

    A handle is valid until the message is acked or delivered again (then it has a new handle).
    Each delivery acked is journalled as a ``DeliveryEvent`` ``acked`` (with the attempt acked)
    in the database transaction that deletes it.

    Returns:
        (acked, failed): failed lists ``{"receipt_handle", "code": "invalid_receipt_handle"}``.

    Raises:
        NotFound: ``consumer_group_not_found``.
    """
    _consumer_group_get(consumer_group)
    unique = list(dict.fromkeys(receipt_handles))
    now = now_ms()
    with transaction.atomic():
        # of=self: lock the group's delivery rows, not the shared Message rows they join.
        taken = list(
            Delivery.objects.select_for_update(of=("self",))
            .select_related("message")
            .defer("message__body", "message__properties")
            .filter(consumer_group=consumer_group, receipt_handle__in=unique)
        )
        found = {d.receipt_handle for d in taken}
        acked = Delivery.objects.filter(pk__in=[d.pk for d in taken]).delete()[0]
        DeliveryEvent.objects.bulk_create(
            _journal_entry(
                group=consumer_group,
                message=d.message,
                kind=DeliveryEvent.Kind.ACKED,
                attempt=d.delivery_attempt,
                now=now,
            )
            for d in taken
        )
    failed = [
        {"receipt_handle": h, "code": "invalid_receipt_handle"} for h in unique if h not in found
    ]
    return acked, failed

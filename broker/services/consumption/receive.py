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
What a consumer does to one delivery by its receipt handle besides the ack (change its invisible
duration, forward it to the DLQ) is in ``broker.services.consumption.deliveries``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from contextlib import nullcontext
from typing import TypeVar

from django.db import connection, transaction

from broker.constants import (
    PROPERTY_DELIVERY_ATTEMPT,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    dlq_topic,
)
from broker.errors import Forbidden, NotFoundKind, not_found
from broker.lookups import consumer_group_by_name, topic_by_name
from broker.models import ConsumerGroup, Delivery, DeliveryEvent, Message
from broker.plumbing.sql import statement_cursor
from broker.plumbing.wakeups import topic_channel, wakeup_on_commit
from broker.rules.clock import now_ms
from broker.rules.filters import FilterExpression
from broker.rules.topics import is_undeliverable_topic
from broker.selectors.filter_sql import filter_condition
from broker.services.commitlog.storage import message_copy
from broker.services.consumption.fifo_take import fifo_messages_take
from broker.services.consumption.handouts import (
    Received,
    journal_entry,
    journal_insert_sql,
    receipt_handle_new,
)
from broker.services.consumption.subscriptions import subscription_record
from broker.services.consumption.take import messages_take

_Row = TypeVar("_Row")


def delivery_move_to_dlq(delivery: Delivery, group: ConsumerGroup, *, now: int) -> DeliveryEvent:
    """Copy the message of ``delivery`` to ``%DLQ%{group}`` (queue 0, created on first use) and
    delete the delivery: the move of a message past its group's ``max_delivery_attempts``
    (RocketMQ's ``sendMsgBack`` to the DLQ), also asked for by a consumer
    (``broker.services.consumption.deliveries.delivery_dead_letter``). The copy keeps the msg_id and adds
    ORIGIN_MESSAGE_ID, RETRY_TOPIC and the delivery attempt to its properties.

    ``delivery`` must be locked by the caller's ``transaction.atomic()`` (``select_for_update``)
    with its ``message`` loaded; ``now`` (ms) is the journal row's time.

    Returns:
        its ``dead_lettered`` journal row (not saved), for the caller to insert.
    """
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
    return journal_entry(
        group=group.name,
        message=message,
        kind=DeliveryEvent.Kind.DEAD_LETTERED,
        attempt=delivery.delivery_attempt,
        now=now,
    )


def fifo_released(topics: Iterable[str]) -> None:
    """Wake the long polls of ``topics`` once the current database transaction commits (at
    once outside one): a FIFO consumer group acked or dead-lettered a message there, so the
    next message of its group may now be taken."""
    for topic in sorted(set(topics)):
        wakeup_on_commit(topic_channel(topic))


def _found(row: _Row | None, kind: NotFoundKind, name: str) -> _Row:
    """``row`` (a cached lookup's answer, ``broker.lookups``).

    Raises:
        NotFound: ``<kind>_not_found`` naming ``name`` when ``row`` is None.
    """
    if row is None:
        raise not_found(kind, name)
    return row


def messages_receive(
    *,
    consumer_group: str,
    topic: str,
    max_messages: int,
    invisible_duration_ms: int,
    filter_expression: FilterExpression | None = None,
) -> list[Received]:
    """Take up to ``max_messages`` messages of ``topic`` for ``consumer_group``, once.

    ``filter_expression`` (TAG or SQL92, default TAG ``*``) is applied by the statement that
    takes new messages: a message it rejects is never handed to the group and counts as
    consumed (the group's offset passes it; RocketMQ's semantics: no retry, no dead letter).
    It is recorded as the group's subscription of the topic (``subscription_record``).

    Expired deliveries of the group come first (redelivered, or dead-lettered past
    ``max_delivery_attempts``), then new messages from the group's queue offsets. Queues locked
    by a concurrent receiver of the same group are skipped (``SKIP LOCKED``), so two receivers
    never get the same message at the same time. Each message handed out is journalled as a
    ``DeliveryEvent`` ``delivered`` (with its attempt), each dead letter as ``dead_lettered``.
    The new messages are taken in one statement (``messages_take``), so a receive is BEGIN, the expired
    deliveries, that statement and COMMIT.

    Raises:
        NotFound: ``consumer_group_not_found``, ``topic_not_found``.
        Forbidden: ``system_topic``: half and Op messages (RMQ_SYS_*) and discarded ones
            (TRANS_CHECK_MAX_TIME_TOPIC) are never delivered; %DLQ%* and %RETRY%* may be received.
    """
    group = _found(consumer_group_by_name(consumer_group), "consumer_group", consumer_group)
    if is_undeliverable_topic(topic):
        raise Forbidden(
            f"Consumers may not receive from the system topic {topic}.",
            code="system_topic",
            details={"topic": topic},
        )
    topic_obj = _found(topic_by_name(topic), "topic", topic)
    if filter_expression is not None:
        subscription_record(
            consumer_group=consumer_group, topic=topic, expression=filter_expression
        )
    condition = filter_condition(filter_expression) if filter_expression is not None else None
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
                journal.append(delivery_move_to_dlq(delivery, group, now=now))
                continue
            delivery.delivery_attempt += 1
            delivery.invisible_until_timestamp = until
            delivery.receipt_handle = receipt_handle_new()
            delivery.save(
                update_fields=["delivery_attempt", "invisible_until_timestamp", "receipt_handle"]
            )
            out.append(
                Received(delivery.message, delivery.delivery_attempt, delivery.receipt_handle)
            )
            handed.append((delivery.message, delivery.delivery_attempt))

        journal.extend(
            journal_entry(
                group=consumer_group,
                message=m,
                kind=DeliveryEvent.Kind.DELIVERED,
                attempt=attempt,
                now=now,
            )
            for m, attempt in handed
        )
        DeliveryEvent.objects.bulk_create(journal)  # dead letters, then hand-outs again
        want = max_messages - len(out)
        if want > 0:
            take = fifo_messages_take if group.fifo else messages_take
            out.extend(
                take(
                    consumer_group=consumer_group,
                    topic=topic,
                    queue_nums=topic_obj.queue_nums,
                    want=want,
                    until=until,
                    now=now,
                    condition=condition,
                )
            )
    return out


def messages_ack(
    *, consumer_group: str, receipt_handles: list[str]
) -> tuple[int, list[dict[str, str]]]:
    """Ack the deliveries behind ``receipt_handles`` for ``consumer_group``.

    A handle is valid until the message is acked or delivered again (then it has a new handle).
    Each delivery acked is journalled as a ``DeliveryEvent`` ``acked`` (with the attempt acked)
    in the same statement that deletes it (``_ack``).

    Returns:
        (acked, failed): failed lists ``{"receipt_handle", "code": "invalid_receipt_handle"}``.

    Raises:
        NotFound: ``consumer_group_not_found``.
    """
    group = _found(consumer_group_by_name(consumer_group), "consumer_group", consumer_group)
    unique = list(dict.fromkeys(receipt_handles))
    now = now_ms()
    found = _ack(consumer_group, unique, now)
    if group.fifo:
        fifo_released(found.values())
    acked = len(found)
    failed = [
        {"receipt_handle": h, "code": "invalid_receipt_handle"} for h in unique if h not in found
    ]
    return acked, failed


@functools.cache
def _ack_sql() -> str:
    """The statement of ``_ack``, built once per process."""
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    journal = journal_insert_sql("acked", attempt="delivery_attempt", order="commit_log_offset")
    return (
        f"WITH acked AS (DELETE FROM {deliveries} d USING {messages} m "
        "WHERE d.consumer_group = %(group)s AND d.receipt_handle = ANY(%(handles)s::text[]) "
        "AND m.commit_log_offset = d.message_id RETURNING d.receipt_handle, d.delivery_attempt, "
        "m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id), "
        f"journalled AS ({journal}) SELECT receipt_handle, topic FROM acked"
    )


def _ack(consumer_group: str, receipt_handles: list[str], now: int) -> dict[str, str]:
    """Delete the group's deliveries behind ``receipt_handles`` and journal each as
    ``acked`` (at ``now``, ms, with the attempt acked) in ONE statement (``_ack_sql``), its own
    database transaction outside a caller's (a savepoint inside one). A delivery being handed
    out again by a concurrent receive is re-read after that receive commits (READ COMMITTED):
    its new handle no longer matches, and the old one fails.

    Returns:
        the receipt handles acked, each with its message's topic.
    """
    params = {
        "group": consumer_group,
        "handles": receipt_handles,
        "kind": DeliveryEvent.Kind.ACKED.value,
        "now": now,
    }
    with (
        transaction.atomic() if connection.in_atomic_block else nullcontext(),
        statement_cursor() as cursor,
    ):
        cursor.execute(_ack_sql(), params)
        return dict(cursor.fetchall())

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
import random
import secrets
from contextlib import nullcontext
from dataclasses import dataclass
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
from broker.models import (
    ConsumerGroup,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    model_from_row,
)
from broker.plumbing.sql import statement_cursor
from broker.rules.clock import now_ms
from broker.rules.topics import is_undeliverable_topic
from broker.services.commitlog.storage import message_copy

_Row = TypeVar("_Row")


@dataclass(frozen=True)
class Received:
    """One message handed to a receiver, with its receipt handle and attempt number."""

    message: Message
    delivery_attempt: int
    receipt_handle: str


def receipt_handle_new() -> str:
    """A new receipt handle: 32 URL-safe characters (24 random bytes), unguessable, so a
    handle names one hand-out of one delivery (``Delivery.receipt_handle``, at most 64)."""
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
    return _journal_entry(
        group=group.name,
        message=message,
        kind=DeliveryEvent.Kind.DEAD_LETTERED,
        attempt=delivery.delivery_attempt,
        now=now,
    )


def _found(row: _Row | None, kind: NotFoundKind, name: str) -> _Row:
    """``row`` (a cached lookup's answer, ``broker.lookups``).

    Raises:
        NotFound: ``<kind>_not_found`` naming ``name`` when ``row`` is None.
    """
    if row is None:
        raise not_found(kind, name)
    return row


def messages_receive(
    *, consumer_group: str, topic: str, max_messages: int, invisible_duration_ms: int
) -> list[Received]:
    """Take up to ``max_messages`` messages of ``topic`` for ``consumer_group``, once.

    Expired deliveries of the group come first (redelivered, or dead-lettered past
    ``max_delivery_attempts``), then new messages from the group's queue offsets. Queues locked
    by a concurrent receiver of the same group are skipped (``SKIP LOCKED``), so two receivers
    never get the same message at the same time. Each message handed out is journalled as a
    ``DeliveryEvent`` ``delivered`` (with its attempt), each dead letter as ``dead_lettered``.
    The new messages are taken in one statement (``_take``), so a receive is BEGIN, the expired
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
            _journal_entry(
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
            out.extend(
                _take(
                    consumer_group=consumer_group,
                    topic=topic,
                    queue_nums=topic_obj.queue_nums,
                    want=want,
                    until=until,
                    now=now,
                )
            )
    return out


def _offsets_create(consumer_group: str, topic: str, queue_nums: int) -> None:
    """Create the group's missing offsets of ``topic`` (at 0): its first receive of the topic,
    or queues added since."""
    ConsumerOffset.objects.bulk_create(
        [
            ConsumerOffset(consumer_group=consumer_group, topic=topic, queue_id=q)
            for q in range(queue_nums)
        ],
        ignore_conflicts=True,
    )


def _journal_insert_sql(source: str, *, attempt: str, order: str) -> str:
    """The delivery journal's insert (``_journal_entry``'s row) of every message
    row of the CTE ``source`` (its ``topic``, ``queue_id``, ``queue_offset``,
    ``commit_log_offset`` and ``msg_id``), for the group ``%(group)s``, of kind ``%(kind)s`` at
    ``%(now)s`` (ms); ``attempt`` and ``order`` are SQL expressions over ``source``."""
    qn = connection.ops.quote_name
    return (
        f"INSERT INTO {DeliveryEvent._meta.db_table} (consumer_group, topic, queue_id, "
        f"queue_offset, commit_log_offset, msg_id, kind, delivery_attempt, {qn('timestamp')}) "
        "SELECT %(group)s, topic, queue_id, queue_offset, commit_log_offset, msg_id, %(kind)s, "
        f"{attempt}, %(now)s FROM {source} ORDER BY {order}"
    )


@functools.cache
def _take_sql() -> str:
    """The statement of ``_take``, built once per process."""
    qn = connection.ops.quote_name
    columns = ", ".join(f"m.{qn(f.column)}" for f in Message._meta.concrete_fields)
    taken_columns = ", ".join(f"t.{qn(f.column)}" for f in Message._meta.concrete_fields)
    offsets, messages = ConsumerOffset._meta.db_table, Message._meta.db_table
    deliveries = Delivery._meta.db_table
    return (
        # The group's offsets no concurrent receiver holds, locked.
        f"WITH offs AS (SELECT o.id, o.queue_id, o.{qn('offset')} AS next FROM {offsets} o "
        "WHERE o.consumer_group = %(group)s AND o.topic = %(topic)s FOR UPDATE SKIP LOCKED), "
        # Up to want messages from each queue at or past its offset (the unique (topic,
        # queue_id, queue_offset) index), numbered queue by queue in the receive's random
        # queue order, then by queue offset.
        f"cand AS (SELECT {columns}, o.id AS offset_id, row_number() OVER ("
        "ORDER BY array_position(%(queue_order)s::int[], m.queue_id), m.queue_offset) AS rn "
        f"FROM offs o CROSS JOIN LATERAL (SELECT * FROM {messages} m WHERE m.topic = %(topic)s "
        "AND m.queue_id = o.queue_id AND m.queue_offset >= o.next ORDER BY m.queue_offset "
        "LIMIT %(want)s) m), "
        "taken AS (SELECT * FROM cand WHERE rn <= %(want)s), "
        f"handed AS (INSERT INTO {deliveries} (consumer_group, message_id, topic, "
        "delivery_attempt, invisible_until_timestamp, receipt_handle) SELECT %(group)s, "
        "commit_log_offset, %(topic)s, 1, %(until)s, (%(handles)s::text[])[rn] FROM taken), "
        f"advanced AS (UPDATE {offsets} o SET {qn('offset')} = a.next FROM (SELECT offset_id, "
        "max(queue_offset) + 1 AS next FROM taken GROUP BY offset_id) a WHERE o.id = a.offset_id), "
        f"journalled AS ({_journal_insert_sql('taken', attempt='1', order='rn')}) "
        # One row even when nothing was taken: how many offsets were locked.
        f"SELECT l.n, (%(handles)s::text[])[t.rn], {taken_columns} "
        "FROM (SELECT count(*) AS n FROM offs) l LEFT JOIN taken t ON true ORDER BY t.rn"
    )


def _take(
    *, consumer_group: str, topic: str, queue_nums: int, want: int, until: int, now: int
) -> list[Received]:
    """Inside the receive's database transaction: take up to ``want`` new messages
    of ``topic`` for ``consumer_group`` in ONE statement (``_take_sql``): lock the group's
    offsets that no concurrent receiver holds (``SKIP LOCKED``), read each queue's messages at
    or past its offset, queues in a random order (no queue starves the others when ``want``
    is small), insert their ``Delivery`` rows (attempt 1, invisible until ``until``, ms) and
    ``delivered`` journal rows (at ``now``, ms) and advance the offsets. When the group has
    fewer offsets than the topic's ``queue_nums``, they are created and the statement runs
    once more for what is still wanted (the offsets already advanced stay locked by this
    transaction and are read again from there).

    Returns:
        the messages taken, each with attempt 1 and its new receipt handle, in queue order.
    """
    sql = _take_sql()
    properties = Message._meta.get_field("properties")
    out: list[Received] = []
    for attempt in range(2):
        order = list(range(queue_nums))
        random.shuffle(order)
        params = {
            "group": consumer_group,
            "topic": topic,
            "queue_order": order,
            "want": want - len(out),
            "handles": [receipt_handle_new() for _ in range(want - len(out))],
            "until": until,
            "now": now,
            "kind": DeliveryEvent.Kind.DELIVERED.value,
        }
        with statement_cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        for _, handle, *values in rows:
            if handle is None:
                continue  # nothing taken: the one row saying how many offsets were locked
            message = model_from_row(Message, values)
            message.properties = properties.from_db_value(message.properties, None, connection)
            out.append(Received(message, 1, handle))
        if attempt or rows[0][0] >= queue_nums or len(out) >= want:
            break
        _offsets_create(consumer_group, topic, queue_nums)
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
    _found(consumer_group_by_name(consumer_group), "consumer_group", consumer_group)
    unique = list(dict.fromkeys(receipt_handles))
    now = now_ms()
    found = _ack(consumer_group, unique, now)
    acked = len(found)
    failed = [
        {"receipt_handle": h, "code": "invalid_receipt_handle"} for h in unique if h not in found
    ]
    return acked, failed


@functools.cache
def _ack_sql() -> str:
    """The statement of ``_ack``, built once per process."""
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    journal = _journal_insert_sql("acked", attempt="delivery_attempt", order="commit_log_offset")
    return (
        f"WITH acked AS (DELETE FROM {deliveries} d USING {messages} m "
        "WHERE d.consumer_group = %(group)s AND d.receipt_handle = ANY(%(handles)s::text[]) "
        "AND m.commit_log_offset = d.message_id RETURNING d.receipt_handle, d.delivery_attempt, "
        "m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id), "
        f"journalled AS ({journal}) SELECT receipt_handle FROM acked"
    )


def _ack(consumer_group: str, receipt_handles: list[str], now: int) -> set[str]:
    """Delete the group's deliveries behind ``receipt_handles`` and journal each as
    ``acked`` (at ``now``, ms, with the attempt acked) in ONE statement (``_ack_sql``), its own
    database transaction outside a caller's (a savepoint inside one). A delivery being handed
    out again by a concurrent receive is re-read after that receive commits (READ COMMITTED):
    its new handle no longer matches, and the old one fails.

    Returns:
        the receipt handles acked.
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
        return {handle for (handle,) in cursor.fetchall()}

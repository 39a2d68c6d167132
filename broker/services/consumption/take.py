"""A receive's new messages, taken in one statement: the group's unlocked queue offsets, each
queue's messages at or past them (a filter's only), their ``Delivery`` rows and ``delivered``
journal rows, and the offsets advanced (``messages_take``)."""

from __future__ import annotations

import functools
import random

from django.db import connection

from broker.models import (
    ConsumeQueue,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    model_from_row,
)
from broker.plumbing.sql import statement_cursor
from broker.services.consumption.handouts import Received, journal_insert_sql, receipt_handle_new


def consumer_offsets_create(consumer_group: str, topic: str, queue_nums: int) -> None:
    """Create the group's missing offsets of ``topic`` (at 0): its first receive of the topic,
    or queues added since."""
    ConsumerOffset.objects.bulk_create(
        [
            ConsumerOffset(consumer_group=consumer_group, topic=topic, queue_id=q)
            for q in range(queue_nums)
        ],
        ignore_conflicts=True,
    )


@functools.lru_cache(maxsize=256)
def _take_sql(condition: str | None = None) -> str:
    """The statement of ``messages_take``, built once per process and filter condition (the SQL of
    ``filter_condition``; its values are parameters, so one statement serves every value).

    Without a condition each queue's offset moves past the last message taken. With one, a
    queue whose every candidate was taken and had fewer than ``want`` moves to its end
    (``ConsumeQueue.max_offset``, read in the same snapshot: the committed messages of a queue
    are a contiguous prefix), so the messages the filter rejected count as consumed."""
    qn = connection.ops.quote_name
    columns = ", ".join(f"m.{qn(f.column)}" for f in Message._meta.concrete_fields)
    taken_columns = ", ".join(f"t.{qn(f.column)}" for f in Message._meta.concrete_fields)
    offsets, messages = ConsumerOffset._meta.db_table, Message._meta.db_table
    deliveries, queues = Delivery._meta.db_table, ConsumeQueue._meta.db_table
    where = f"AND ({condition}) " if condition else ""
    if condition is None:
        advance = "SELECT offset_id, max(queue_offset) + 1 AS next FROM taken GROUP BY offset_id"
    else:
        # Per locked queue: its candidates, those taken, and where its offset moves.
        advance = (
            "SELECT p.offset_id, CASE WHEN p.n_taken = p.n_cand AND p.n_cand < %(want)s "
            "THEN p.max_offset ELSE p.last_next END AS next FROM (SELECT o.id AS offset_id, "
            "q.max_offset, count(c.rn) AS n_cand, count(c.rn) FILTER (WHERE c.rn <= %(want)s) "
            "AS n_taken, max(c.queue_offset) FILTER (WHERE c.rn <= %(want)s) + 1 AS last_next "
            f"FROM offs o JOIN {queues} q ON q.topic = %(topic)s AND q.queue_id = o.queue_id "
            "LEFT JOIN cand c ON c.offset_id = o.id GROUP BY o.id, q.max_offset) p"
        )
    return (
        # The group's offsets no concurrent receiver holds, locked.
        f"WITH offs AS (SELECT o.id, o.queue_id, o.{qn('offset')} AS next FROM {offsets} o "
        "WHERE o.consumer_group = %(group)s AND o.topic = %(topic)s FOR UPDATE SKIP LOCKED), "
        # Up to want messages (the filter's, when there is one) from each queue at or past its
        # offset (the unique (topic, queue_id, queue_offset) index; a tag filter's
        # message_queue_tag), numbered queue by queue in the receive's random queue order,
        # then by queue offset.
        f"cand AS (SELECT {columns}, o.id AS offset_id, row_number() OVER ("
        "ORDER BY array_position(%(queue_order)s::int[], m.queue_id), m.queue_offset) AS rn "
        f"FROM offs o CROSS JOIN LATERAL (SELECT * FROM {messages} m WHERE m.topic = %(topic)s "
        f"AND m.queue_id = o.queue_id AND m.queue_offset >= o.next {where}"
        "ORDER BY m.queue_offset LIMIT %(want)s) m), "
        "taken AS (SELECT * FROM cand WHERE rn <= %(want)s), "
        f"handed AS (INSERT INTO {deliveries} (consumer_group, message_id, topic, "
        "delivery_attempt, invisible_until_timestamp, receipt_handle) SELECT %(group)s, "
        "commit_log_offset, %(topic)s, 1, %(until)s, (%(handles)s::text[])[rn] FROM taken), "
        f"advanced AS (UPDATE {offsets} o SET {qn('offset')} = a.next FROM ({advance}) a "
        f"WHERE o.id = a.offset_id AND a.next > o.{qn('offset')}), "
        f"journalled AS ({journal_insert_sql('taken', attempt='1', order='rn')}) "
        # One row even when nothing was taken: how many offsets were locked.
        f"SELECT l.n, (%(handles)s::text[])[t.rn], {taken_columns} "
        "FROM (SELECT count(*) AS n FROM offs) l LEFT JOIN taken t ON true ORDER BY t.rn"
    )


def messages_take(
    *,
    consumer_group: str,
    topic: str,
    queue_nums: int,
    want: int,
    until: int,
    now: int,
    condition: tuple[str, dict[str, object]] | None = None,
) -> list[Received]:
    """Inside a receive's database transaction (``messages_receive``): take up to ``want`` new messages
    of ``topic`` for ``consumer_group`` in ONE statement (``_take_sql``): lock the group's
    offsets that no concurrent receiver holds (``SKIP LOCKED``), read each queue's messages at
    or past its offset, queues in a random order (no queue starves the others when ``want``
    is small), insert their ``Delivery`` rows (attempt 1, invisible until ``until``, ms) and
    ``delivered`` journal rows (at ``now``, ms) and advance the offsets; ``condition`` is a
    filter's (SQL, parameters) from ``filter_condition``. When the group has
    fewer offsets than the topic's ``queue_nums``, they are created and the statement runs
    once more for what is still wanted (the offsets already advanced stay locked by this
    transaction and are read again from there).

    Returns:
        the messages taken, each with attempt 1 and its new receipt handle, in queue order.
    """
    sql = _take_sql(condition[0] if condition else None)
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
            **(condition[1] if condition else {}),
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
        consumer_offsets_create(consumer_group, topic, queue_nums)
    return out

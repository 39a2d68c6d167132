"""The timer's move (RocketMQ ``TimerMessageStore`` dequeue): due delay and timer messages
copied from ``RMQ_SYS_WHEEL_TIMER`` to their topics, set-based, one database transaction per
batch, so a worker that dies mid-move leaves each message either delivered once or still
scheduled, never lost or doubled."""

from __future__ import annotations

import functools

from broker.constants import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from broker.models import ScheduledMessage
from broker.plumbing.sql import statement_cursor
from broker.rules.clock import now_ms
from broker.services.commitlog.statements import COPIED_COLUMNS, queue_slots_cte
from broker.services.commitlog.storage import message_visible_on_commit

DELIVER_BATCH = 1000
"""Due messages moved per statement (and database transaction)."""


@functools.cache
def _deliver_sql() -> str:
    """The move of up to ``%(limit)s`` messages due by ``%(now)s``, as one statement."""
    table = ScheduledMessage._meta.db_table
    scheduled = ScheduledMessage.State.SCHEDULED
    delivered = ScheduledMessage.State.DELIVERED
    copied = ", ".join(COPIED_COLUMNS)
    return (
        "WITH due AS (SELECT s.commit_log_offset AS source_offset, s.topic, s.queue_id, "
        f"s.delivery_timestamp FROM {table} s JOIN broker_consumequeue q "  # noqa: S608 - the model's table
        "ON q.topic = s.topic AND q.queue_id = s.queue_id "
        f"WHERE s.state = '{scheduled}' AND s.delivery_timestamp <= %(now)s "
        "ORDER BY s.delivery_timestamp, s.commit_log_offset LIMIT %(limit)s "
        "FOR UPDATE OF s SKIP LOCKED), "
        "due_counts AS (SELECT topic, queue_id, count(*) AS n FROM due GROUP BY topic, queue_id), "
        f"{queue_slots_cte(name='moved', counts='due_counts')}, "
        "planned AS (SELECT d.source_offset, d.topic, d.queue_id, sl.base - 1 + row_number() "
        "OVER (PARTITION BY d.topic, d.queue_id ORDER BY d.delivery_timestamp, d.source_offset) "
        "AS queue_offset, nextval(pg_get_serial_sequence('broker_message', "
        "'commit_log_offset')) AS copy_offset FROM due d JOIN moved_slot sl "
        "ON sl.topic = d.topic AND sl.queue_id = d.queue_id), "
        "copied AS (INSERT INTO broker_message (commit_log_offset, topic, queue_id, "
        f"queue_offset, properties, sys_flag, store_timestamp, {copied}) SELECT p.copy_offset, "
        "p.topic, p.queue_id, p.queue_offset, m.properties - %(drop)s::text[], 0, %(now)s, "
        f"{', '.join(f'm.{c}' for c in COPIED_COLUMNS)} "
        "FROM planned p JOIN broker_message m ON m.commit_log_offset = p.source_offset), "
        f"marked AS (UPDATE {table} s SET state = '{delivered}', "
        "delivered_commit_log_offset = p.copy_offset, ended_timestamp = %(now)s "
        "FROM planned p WHERE s.commit_log_offset = p.source_offset RETURNING s.topic) "
        "SELECT topic, count(*) FROM marked GROUP BY topic"
    )


def scheduled_messages_deliver(*, limit: int = DELIVER_BATCH, now: int | None = None) -> int:
    """Deliver up to ``limit`` scheduled messages due by ``now`` (ms; default the clock), the
    earliest first, in one statement (its own database transaction): each is copied to its
    topic and queue (msg_id, body, tags, keys, properties without ``REAL_TOPIC``/``REAL_QID``,
    producer group and born time kept; stored now) and marked DELIVERED with the copy's commit
    log offset; their topics' long polls are woken. Rows another worker is moving are skipped
    (``SKIP LOCKED``); a message whose queue no longer exists stays SCHEDULED (overdue).

    Returns how many were delivered.
    """
    params = {
        "now": now if now is not None else now_ms(),
        "limit": limit,
        "drop": [PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID],
    }
    with statement_cursor() as cursor:
        cursor.execute(_deliver_sql(), params)
        per_topic = cursor.fetchall()
    for topic, _ in per_topic:
        message_visible_on_commit(topic)
    return sum(n for _, n in per_topic)

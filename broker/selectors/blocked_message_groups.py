"""A FIFO consumer group's blocked message groups: per (topic, message group), the head
message holding the rest back after failing at least once, since when, and how many wait behind.

FIFO consumption keeps at most one ``Delivery`` of each (topic, message group) per FIFO
consumer group: the group's head, its earliest message not yet acked or dead-lettered. The head
is blocked once it has failed: handed out again (``delivery_attempt`` > 1) or its invisible
time ran out (nacked: invisible duration 0, or never acked) with no new hand-out yet. It blocks
since its first hand-out, the journal's ``delivered`` row of attempt 1 (the latest, should an
operator have redelivered it). See docs/console.md, "Blocked message groups".
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from broker.models import ConsumerGroup, Delivery, DeliveryEvent, Message
from broker.rules.clock import now_ms

BLOCKED_PAGE = 100  # message groups per page: one query whatever the page
WAITING_CAP = 1_000  # messages counted behind a head (an index range of at most 1,001 rows)


def _blocked(h: str) -> str:
    """The one definition of a blocked head, over the delivery columns of alias ``h`` at
    ``%(now)s``: handed out again, or its invisible time ran out since its first hand-out
    (attempt 0 is an operator's redelivery, not yet handed out: not blocked)."""
    return (
        f"({h}.delivery_attempt > 1 OR ({h}.delivery_attempt = 1 "
        f"AND {h}.invisible_until_timestamp <= %(now)s))"
    )


def _blocked_since(h: str, group: str) -> str:
    """The first hand-out (ms) of head ``h`` to consumer group ``group`` (SQL expressions):
    the latest ``delivered`` journal row of attempt 1."""
    journal, qn = DeliveryEvent._meta.db_table, connection.ops.quote_name
    return (
        f"(SELECT max(e.{qn('timestamp')}) FROM {journal} e "
        f"WHERE e.commit_log_offset = {h}.commit_log_offset AND e.consumer_group = {group} "
        "AND e.kind = 'delivered' AND e.delivery_attempt = 1)"
    )


@dataclass(frozen=True)
class BlockedMessageGroup:
    """One blocked message group of a FIFO consumer group and its head message.

    ``delivery_attempt``: the head's hand-outs so far (of ``max_delivery_attempts``, past
    which the broker moves it to ``%DLQ%{group}`` itself); ``invisible_until_timestamp`` (ms):
    when it is visible again; ``blocked_since`` (ms): its first hand-out, None when the journal
    no longer holds it; ``waiting``: later messages of the message group in its queue, counted
    up to ``WAITING_CAP`` (``waiting_capped``: there are more)."""

    consumer_group: str
    topic: str
    message_group: str
    msg_id: str
    commit_log_offset: int
    queue_id: int
    queue_offset: int
    tags: str
    keys: str
    store_timestamp: int
    delivery_attempt: int
    max_delivery_attempts: int
    invisible_until_timestamp: int
    blocked_since: int | None
    waiting: int
    waiting_capped: bool


@dataclass(frozen=True)
class BlockedMessageGroupPage:
    """The first ``BLOCKED_PAGE`` blocked message groups by ``blocked_since`` (oldest first,
    unknown first), and how many there are in all (``total``)."""

    groups: list[BlockedMessageGroup]
    total: int


def _heads_sql(*, one: bool) -> str:
    """The statement of the blocked heads of ``%(group)s`` (``one``: of ``%(topic)s`` and
    ``%(message_group)s`` only), each with its blocked-since and waiting count, ordered,
    ``LIMIT %(limit)s``, and the total as a window count."""
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    narrow = "AND d.topic = %(topic)s AND m.message_group = %(message_group)s" if one else ""
    return (
        f"WITH heads AS (SELECT DISTINCT ON (d.topic, m.message_group) d.topic, "
        "m.message_group, m.msg_id, m.commit_log_offset, m.queue_id, m.queue_offset, m.tags, "
        "m.keys, m.store_timestamp, d.delivery_attempt, d.invisible_until_timestamp "
        f"FROM {deliveries} d JOIN {messages} m ON m.commit_log_offset = d.message_id "
        f"WHERE d.consumer_group = %(group)s AND m.message_group <> '' {narrow} "
        "ORDER BY d.topic, m.message_group, m.queue_id, m.queue_offset), "
        f"blocked AS (SELECT * FROM heads h WHERE {_blocked('h')}) "
        f"SELECT b.*, {_blocked_since('b', '%(group)s')} AS blocked_since, "
        f"(SELECT count(*) FROM (SELECT 1 FROM {messages} w WHERE w.topic = b.topic "
        "AND w.queue_id = b.queue_id AND w.message_group = b.message_group "
        "AND w.message_group <> '' AND w.queue_offset > b.queue_offset "
        "LIMIT %(cap)s) behind) AS waiting, count(*) OVER () AS total "
        "FROM blocked b ORDER BY blocked_since ASC NULLS FIRST, b.topic, b.message_group "
        "LIMIT %(limit)s"
    )


def _read(
    consumer_group: str,
    max_delivery_attempts: int,
    *,
    now: int,
    limit: int,
    topic: str | None = None,
    message_group: str | None = None,
) -> BlockedMessageGroupPage:
    params = {
        "group": consumer_group,
        "now": now,
        "cap": WAITING_CAP + 1,
        "limit": limit,
        "topic": topic,
        "message_group": message_group,
    }
    with connection.cursor() as cursor:
        cursor.execute(_heads_sql(one=topic is not None), params)
        rows = cursor.fetchall()
    groups = [
        BlockedMessageGroup(
            consumer_group=consumer_group,
            topic=t,
            message_group=mg,
            msg_id=msg_id,
            commit_log_offset=clo,
            queue_id=qid,
            queue_offset=qoff,
            tags=tags,
            keys=keys,
            store_timestamp=stored,
            delivery_attempt=attempt,
            max_delivery_attempts=max_delivery_attempts,
            invisible_until_timestamp=until,
            blocked_since=since,
            waiting=min(waiting, WAITING_CAP),
            waiting_capped=waiting > WAITING_CAP,
        )
        for t, mg, msg_id, clo, qid, qoff, tags, keys, stored, attempt, until, since, waiting, _ in (
            rows
        )
    ]
    return BlockedMessageGroupPage(groups, rows[0][-1] if rows else 0)


def blocked_message_groups(
    *,
    consumer_group: str,
    max_delivery_attempts: int,
    now: int | None = None,
    limit: int = BLOCKED_PAGE,
) -> BlockedMessageGroupPage:
    """The blocked message groups of the FIFO consumer group ``consumer_group`` at ``now``
    (ms; default the clock), oldest ``blocked_since`` first, at most ``limit``, with the total.
    ``max_delivery_attempts``: the group's, copied into each row. One query: the group's
    deliveries of message groups (one per message group under FIFO consumption), each head's
    first hand-out through the journal's ``commit_log_offset`` index and its waiting count
    through ``message_group_order`` (at most ``WAITING_CAP`` + 1 index entries)."""
    return _read(
        consumer_group,
        max_delivery_attempts,
        now=now_ms() if now is None else now,
        limit=limit,
    )


def blocked_message_group_get(
    *,
    consumer_group: str,
    max_delivery_attempts: int,
    topic: str,
    message_group: str,
    now: int | None = None,
) -> BlockedMessageGroup | None:
    """The message group ``message_group`` of ``topic`` of the FIFO consumer group, if it is
    blocked at ``now`` (ms; default the clock); None when it is not (its head was acked,
    dead-lettered, has not failed, or it has no delivery). One query."""
    page = _read(
        consumer_group,
        max_delivery_attempts,
        now=now_ms() if now is None else now,
        limit=1,
        topic=topic,
        message_group=message_group,
    )
    return page.groups[0] if page.groups else None


@dataclass(frozen=True)
class FifoBlockedCount:
    """A FIFO consumer group's blocked message groups in figures: how many (``blocked``), and
    the oldest (``oldest_since``, ms, its head's first hand-out; None when the journal no
    longer says for any) with its ``topic`` and ``message_group``."""

    consumer_group: str
    blocked: int
    oldest_since: int | None
    topic: str
    message_group: str


def blocked_message_group_counts(*, now: int | None = None) -> dict[str, FifoBlockedCount]:
    """Per FIFO consumer group with any blocked message group at ``now`` (ms; default the
    clock), by name: ``FifoBlockedCount``. For ``/metrics`` and the ``fifo_blocked`` alert.
    One query over the FIFO groups' deliveries of message groups."""
    now = now_ms() if now is None else now
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    groups = ConsumerGroup._meta.db_table
    sql = (
        f"WITH heads AS (SELECT DISTINCT ON (d.consumer_group, d.topic, m.message_group) "
        "d.consumer_group, d.topic, m.message_group, m.commit_log_offset, d.delivery_attempt, "
        f"d.invisible_until_timestamp FROM {deliveries} d "
        f"JOIN {groups} g ON g.name = d.consumer_group AND g.fifo "
        f"JOIN {messages} m ON m.commit_log_offset = d.message_id "
        "WHERE m.message_group <> '' "
        "ORDER BY d.consumer_group, d.topic, m.message_group, m.queue_id, m.queue_offset), "
        f"blocked AS (SELECT h.*, {_blocked_since('h', 'h.consumer_group')} AS since "
        f"FROM heads h WHERE {_blocked('h')}) "
        "SELECT DISTINCT ON (consumer_group) consumer_group, "
        "count(*) OVER (PARTITION BY consumer_group), since, topic, message_group "
        "FROM blocked ORDER BY consumer_group, since ASC NULLS LAST, topic, message_group"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"now": now})
        return {row[0]: FifoBlockedCount(*row) for row in cursor.fetchall()}

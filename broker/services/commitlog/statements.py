"""The commit log's set-based appends, as CTEs of a caller's larger statement: a batch of new
messages (``messages_append_cte``), the commits' copies of half messages made inside the
database (``message_deliver_cte``), and the offsets both reserve in several queues at once
(``queue_slots_cte``). One row at a time is ``broker.services.commitlog.storage``'s."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection

from broker.models import Message
from broker.plumbing.sql import rows_cte
from broker.rules.clock import now_ms

MESSAGE_COLUMNS = (
    "topic",
    "queue_id",
    "msg_id",
    "tags",
    "keys",
    "body",
    "body_is_text",
    "properties",
    "sys_flag",
    "producer_group",
    "message_group",
    "born_timestamp",
    "store_timestamp",
    "prepared_transaction_offset",
)
"""The columns of ``broker_message`` an append writes (besides its offsets)."""


def messages_append_cte(messages: Sequence[Message], *, name: str) -> tuple[str, list[Any]]:
    """CTEs that append ``messages`` (unsaved, as ``message_new`` makes them; their
    msg_ids distinct) inside a larger statement, so the caller writes rows that depend on the
    stored messages in the same round trip (half messages and their transactions,
    ``transaction_prepare`` and its batch; a batch of normal messages, ``messages_append``).

    The messages of one queue take consecutive offsets in the given order, from one move of
    its counter (``queue_slots_cte``: counters locked in ``(topic, queue_id)`` order);
    ``{name}`` inserts them and returns ``commit_log_offset, queue_offset, msg_id`` per message.
    If a queue does not exist, nothing is written and no message is returned
    (``queue_slots_cte``).

    Returns:
        (SQL of the CTEs ``{name}_items``, ``{name}_counts``, ``{name}_locked``,
        ``{name}_slot`` and ``{name}``, without ``WITH``; their parameters).
    """
    attnames, item_columns = _message_item_columns()
    items, params = rows_cte(
        f"{name}_items",
        item_columns,
        [[n, *(getattr(m, a) for a in attnames)] for n, m in enumerate(messages)],
    )
    columns = ", ".join(MESSAGE_COLUMNS)
    sql = (
        f"{items}, "
        f"{name}_counts AS (SELECT topic, queue_id, count(*) AS n FROM {name}_items "
        "GROUP BY topic, queue_id), "
        f"{queue_slots_cte(name=name, counts=f'{name}_counts')}, "
        f"{name} AS (INSERT INTO broker_message ({columns}, queue_offset) "
        f"SELECT {', '.join(f'i.{c}' for c in MESSAGE_COLUMNS)}, s.base - 1 + row_number() OVER "
        "(PARTITION BY i.topic, i.queue_id ORDER BY i.ord) "
        f"FROM {name}_items i JOIN {name}_slot s ON s.topic = i.topic AND s.queue_id = i.queue_id "
        "ORDER BY i.ord RETURNING commit_log_offset, queue_offset, msg_id)"
    )
    return sql, params


@functools.cache
def _message_item_columns() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The attribute names of ``MESSAGE_COLUMNS`` and the ``rows_cte`` columns of an appended
    message (``ord`` first), worked out once per process."""
    fields = [Message._meta.get_field(column) for column in MESSAGE_COLUMNS]
    return tuple(f.attname for f in fields), (
        ("ord", "integer"),
        *((f.column, f.db_type(connection)) for f in fields),
    )


def queue_slots_cte(*, name: str, counts: str) -> str:
    """Two CTEs that reserve offsets in several queues at once: ``{name}_locked``
    locks the counter (``ConsumeQueue`` row) of each queue of ``counts`` (a CTE of ``topic,
    queue_id, n``) in ``(topic, queue_id)`` order, the order every writer of several queues
    takes them in, so two statements never deadlock on them; ``{name}_slot`` moves each by
    ``n`` and returns ``topic, queue_id, base``: the queue's first offset reserved (``base``
    to ``base + n - 1``). All or none: when a queue of ``counts`` has no counter row, no
    counter moves and ``{name}_slot`` is empty, so a statement writes nothing rather than part
    of its rows, and may run as its own database transaction whatever its size.

    The counters stay locked until the database transaction ends, which keeps offsets gap-free
    (a rollback returns them) and committed offsets a contiguous prefix.
    """
    return (
        f"{name}_locked AS (SELECT q.topic, q.queue_id, c.n FROM broker_consumequeue q "
        f"JOIN {counts} c ON q.topic = c.topic AND q.queue_id = c.queue_id "
        "ORDER BY q.topic, q.queue_id FOR UPDATE OF q), "
        f"{name}_slot AS (UPDATE broker_consumequeue q SET max_offset = q.max_offset + l.n "
        f"FROM {name}_locked l WHERE q.topic = l.topic AND q.queue_id = l.queue_id "
        f"AND (SELECT count(*) FROM {name}_locked) = (SELECT count(*) FROM {counts}) "
        "RETURNING q.topic, q.queue_id, q.max_offset - l.n AS base)"
    )


def message_deliver_cte(
    *, source: str, drop_properties: tuple[str, ...], sys_flag: int, name: str
) -> tuple[str, list[Any]]:
    """The commits' deliveries as CTEs of a larger statement: copy each half message at
    ``{source}.half_commit_log_offset`` to ``({source}.topic, {source}.queue_id)`` inside the
    database (its body never travels). The copy keeps what ``message_copy`` keeps (msg_id,
    body, tags, keys, producer group, ``born_timestamp``), gets the half message's properties
    without ``drop_properties``, the given ``sys_flag``, the store time now (ms) and
    ``prepared_transaction_offset`` the half message's commit log offset. ``source`` names an earlier CTE with one row per commit, of the columns
    ``transaction_id``, ``topic``, ``queue_id`` and ``half_commit_log_offset`` (the locked
    transaction rows); no row there, nothing is written.

    The copies to one queue take consecutive offsets, in transaction id order, from one move of
    its counter (``queue_slots_cte``). A counter moves only by the copies written to its queue
    (a half message that does not exist is not counted and not copied; if a queue does not
    exist, nothing is copied): the statement may run as its own database transaction and
    leaves no gap in any queue. ``{name}`` returns ``commit_log_offset, queue_offset,
    prepared_transaction_offset`` per copy; a second delivery of the same half message fails
    the statement with IntegrityError.

    Returns:
        (SQL of the CTEs ``{name}_src``, ``{name}_counts``, ``{name}_locked``, ``{name}_slot``
        and ``{name}``, without ``WITH``; their parameters).
    """
    copied = ", ".join(f"m.{c}" for c in COPIED_COLUMNS)
    sql = (
        f"{name}_src AS (SELECT g.transaction_id, g.topic, g.queue_id, h.commit_log_offset "
        f"AS source_offset FROM {source} g JOIN broker_message h "
        "ON h.commit_log_offset = g.half_commit_log_offset), "
        f"{name}_counts AS (SELECT topic, queue_id, count(*) AS n FROM {name}_src "
        "GROUP BY topic, queue_id), "
        f"{queue_slots_cte(name=name, counts=f'{name}_counts')}, "
        f"{name} AS (INSERT INTO broker_message (topic, queue_id, queue_offset, properties, "
        f"sys_flag, store_timestamp, prepared_transaction_offset, {', '.join(COPIED_COLUMNS)}) "
        "SELECT s.topic, s.queue_id, sl.base - 1 + row_number() OVER "
        "(PARTITION BY s.topic, s.queue_id ORDER BY s.transaction_id), "
        f"m.properties - %s::text[], %s, %s, m.commit_log_offset, {copied} FROM {name}_src s "
        f"JOIN {name}_slot sl ON sl.topic = s.topic AND sl.queue_id = s.queue_id "
        "JOIN broker_message m ON m.commit_log_offset = s.source_offset "
        "RETURNING commit_log_offset, queue_offset, prepared_transaction_offset)"
    )
    return sql, [list(drop_properties), sys_flag, now_ms()]


COPIED_COLUMNS = (
    "msg_id",
    "tags",
    "keys",
    "body",
    "body_is_text",
    "producer_group",
    "born_timestamp",
)
"""What a copy inside the database takes from its source message unchanged, as
``message_copy`` does (``message_deliver_cte``, the timer's ``scheduled_messages_deliver``)."""

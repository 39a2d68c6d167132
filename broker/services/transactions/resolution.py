"""How a PREPARED transaction ends: resolved (commit or rollback, by its producer, a check
answer or an operator) or discarded by the scan; and the journal and announcement of every
change of a transaction (RocketMQ EndTransactionProcessor.endMessageTransaction,
TransactionalMessageServiceImpl.deletePrepareMessage,
AbstractTransactionalMessageCheckListener.resolveDiscardMsg).

Every function here runs inside the caller's database transaction with the transaction row
locked (``broker.services.transactions.end.transaction_get_locked``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    PROPERTY_DISCARD_REASON,
    PROPERTY_HALF_QUEUE_OFFSET,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_NOT_TYPE,
)
from broker.models import Message, Resolution, Transaction, TransactionEvent, model_from_row
from broker.plumbing.sql import rows_cte, statement_cursor
from broker.rules.clock import now_ms
from broker.rules.states import (
    ResolvedBy,
    ResolvingAction,
    TransactionState,
    resolution_of_action,
    state_of_action,
)
from broker.services.commitlog.statements import message_deliver_cte
from broker.services.commitlog.storage import message_copy, message_visible_on_commit
from broker.services.transactions.events import (
    transaction_announce,
    transaction_event_record,
    transactions_announce,
)
from broker.services.transactions.op_messages import op_buffer_note, op_buffer_notes

logger = logging.getLogger("halfmoon.transactions")


# Properties stripped when a half message is re-stored on its real topic
# (EndTransactionProcessor.endMessageTransaction clears REAL_TOPIC and REAL_QID).
_HALF_ONLY_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED)


def transaction_resolve_locked(
    tx: Transaction, *, action: ResolvingAction, resolved_by: str, reason: str
) -> None:
    """Deliver (commit) or drop (rollback) a transaction and journal its resolution for the
    Op log: the resolution of producers' ends taking the locked path, check answers and
    operators.

    A commit copies the half message to its real topic and queue, without the half-only
    properties (REAL_TOPIC, REAL_QID, TRAN_MSG) and with ``sys_flag``
    TRANSACTION_COMMIT_TYPE; a rollback delivers nothing. Either way a ``Resolution`` row is
    written, from which ``broker.services.transactions.op_messages.op_flush`` writes the Op message (RIP-50) after
    this database transaction commits. The writes are the statement of
    ``transactions_resolve_prepared`` (``_resolve_sql``) for this one transaction, admitting it
    in its current state, inside the caller's database transaction (no savepoint). Sets the
    saved fields on ``tx`` (``state``, ``resolved_by``, ``resolved_timestamp``,
    ``next_check_timestamp``, ``queue_offset`` of the delivered message).

    ``tx`` must be PREPARED (or DISCARDED, for an operator) and locked with
    ``select_for_update`` inside the caller's database transaction; ``resolved_by`` is one of
    ``ResolvedBy``. The unique constraints on ``Resolution`` and
    ``Message.prepared_transaction_offset`` refuse a second resolution (IntegrityError).

    Raises:
        KeyError: ``action`` is not ``commit`` or ``rollback``.
        LookupError: the half message or the real queue is missing; nothing was written.
        IntegrityError: a second resolution; the caller's database transaction must roll back.
    """
    end = PreparedEnd(tx.transaction_id, tx.producer_group, action, resolved_by, reason)
    sql, params = _resolve_sql([end], from_state=tx.state)
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise LookupError(
            f"transaction {tx.transaction_id}: no half message at commit log offset "
            f"{tx.half_commit_log_offset} or no queue {tx.topic}#{tx.queue_id}"
        )
    resolved = model_from_row(Transaction, row)
    for attname in _RESOLVED_FIELDS:
        setattr(tx, attname, getattr(resolved, attname))
    op_buffer_note(half_queue_id=tx.half_queue_id, half_queue_offset=tx.half_queue_offset)
    transaction_announce(tx, "resolved")
    if tx.state == TransactionState.COMMITTED:
        message_visible_on_commit(tx.topic)


# The transaction's fields a resolution writes (``_resolve_sql``).
_RESOLVED_FIELDS = (
    "state",
    "resolved_by",
    "resolved_timestamp",
    "next_check_timestamp",
    "queue_offset",
)


class PreparedEnd(NamedTuple):
    """One resolution asked of ``transactions_resolve_prepared``: resolve ``transaction_id``
    with ``action`` (commit or rollback) if it is PREPARED and was sent by ``producer_group``;
    ``resolved_by`` one of ``ResolvedBy``; ``reason`` the journalled remark."""

    transaction_id: str
    producer_group: str
    action: ResolvingAction
    resolved_by: str
    reason: str


def transactions_resolve_prepared(ends: Sequence[PreparedEnd]) -> dict[str, Transaction]:
    """Resolve every transaction of ``ends`` that is PREPARED and was sent by its item's
    producer group, in ONE statement (``_resolve_sql``), however many they are: the common case
    of an end (``POST /transactions/{id}/end``: one item) and of an end batch (``POST
    /transactions/end-batch``: all of its items).

    The statement locks the transaction rows in id order (``SELECT ... FOR UPDATE`` by primary
    key in its first CTE; under READ COMMITTED a row changed meanwhile by a concurrent end is
    re-read, and its current state and group decide), then writes for each: for a commit the
    copy of the half message to its real queue (``message_deliver_cte``: the copies to one
    queue take consecutive offsets of one counter move, counters locked in ``(topic,
    queue_id)`` order), the ``Resolution`` row (Op message source, unique per transaction) and
    the transaction's new state. The Op buffer notes, the wake-ups of the real topics and the
    announcements follow as in ``transaction_resolve_locked``.

    Outside a database transaction the statement is one by itself (no BEGIN, no separate
    ``SELECT ... FOR UPDATE``, no COMMIT round trips); inside one it runs in a savepoint, so a
    refused statement leaves the caller's transaction usable.

    Args:
        ends: the resolutions asked, at most one per transaction id.

    Returns:
        the resolved transactions by id. An id missing from it had nothing written: unknown,
        another producer group, not PREPARED, a missing half message or real queue, or a
        constraint refusing a second resolution (then nothing of the statement is written and
        the result is empty). The caller takes the locked path for those
        (``broker.services.transactions.end.transaction_end``), which answers each as the contract
        says (404, 403, 200 for the same action again, 409).

    Raises:
        ValueError: two items for the same transaction id.
    """
    if not ends:
        return {}
    if len({end.transaction_id for end in ends}) != len(ends):
        raise ValueError("transactions_resolve_prepared takes one item per transaction id")
    sql, params = _resolve_sql(ends, from_state=TransactionState.PREPARED)
    try:
        with (
            transaction.atomic() if connection.in_atomic_block else nullcontext(),
            statement_cursor() as cursor,
        ):
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    except IntegrityError:  # a second resolution: the locked path says what ended each
        return {}
    resolved = {}
    for row in rows:
        tx = model_from_row(Transaction, row)
        resolved[tx.transaction_id] = tx
    op_buffer_notes([(tx.half_queue_id, tx.half_queue_offset) for tx in resolved.values()])
    transactions_announce(list(resolved.values()), "resolved")
    # One wake-up per real topic, however many of the batch's commits went to it.
    for topic in sorted(
        {tx.topic for tx in resolved.values() if tx.state == TransactionState.COMMITTED}
    ):
        message_visible_on_commit(topic)
    return resolved


def transaction_resolve_prepared(
    *,
    transaction_id: str,
    producer_group: str,
    action: ResolvingAction,
    resolved_by: str,
    reason: str,
) -> Transaction | None:
    """``transactions_resolve_prepared`` of one transaction; the resolved transaction, or None
    when nothing was written (the caller takes the locked path)."""
    end = PreparedEnd(transaction_id, producer_group, action, resolved_by, reason)
    return transactions_resolve_prepared([end]).get(transaction_id)


def _resolve_sql(ends: Sequence[PreparedEnd], *, from_state: str) -> tuple[str, list[Any]]:
    """The one statement that resolves transactions (``transactions_resolve_prepared``,
    ``transaction_resolve_locked``) and its parameters: it resolves each transaction of
    ``ends`` whose row is in ``from_state`` (a ``TransactionState``) and was sent by its item's
    producer group, and returns the resolved transactions' rows (every concrete column of
    ``Transaction``, in field order)."""
    table = Transaction._meta.db_table
    now = now_ms()
    items, params = rows_cte(
        "items",
        [
            ("transaction_id", "varchar"),
            ("producer_group", "varchar"),
            ("state", "varchar"),
            ("action", "varchar"),
            ("resolved_by", "varchar"),
            ("reason", "text"),
        ],
        [
            [
                end.transaction_id,
                end.producer_group,
                state_of_action(end.action).value,
                resolution_of_action(end.action).value,
                end.resolved_by,
                end.reason,
            ]
            for end in ends
        ],
    )
    params += [from_state, TransactionState.COMMITTED]
    ctes = [
        items,
        # Locked by primary key alone, in id order; the group and state are checked on the
        # locked rows (their current version): a condition on them in the locking query let
        # the planner pick the (producer_group, state) index and scan every PREPARED row of
        # the group for each end. One primary-key lookup per item (a LATERAL subquery that
        # locks is never turned into a join): as a join of the items with the table, the
        # generic plan that a connection's prepared statement keeps, made while the table
        # was small, was a hash join over the whole table, on every end for the
        # connection's life (docs/design.md "Prepared statements on growing tables").
        "locked AS (SELECT t.* "
        "FROM (SELECT DISTINCT transaction_id FROM items ORDER BY transaction_id) i "
        "CROSS JOIN LATERAL (SELECT transaction_id, producer_group, state, topic, queue_id, "
        f"half_queue_id, half_queue_offset, half_commit_log_offset FROM {table} x "
        "WHERE x.transaction_id = i.transaction_id FOR UPDATE) t)",
        "gate AS (SELECT t.transaction_id, t.topic, t.queue_id, t.half_queue_id, "
        "t.half_queue_offset, t.half_commit_log_offset, i.state, i.action, i.resolved_by, "
        "i.reason FROM locked t JOIN items i ON i.transaction_id = t.transaction_id "
        "AND i.producer_group = t.producer_group WHERE t.state = %s)",
        "commits AS (SELECT * FROM gate WHERE state = %s)",
    ]
    cte, cte_params = message_deliver_cte(
        source="commits",
        drop_properties=_HALF_ONLY_PROPERTIES,
        sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
        name="delivered",
    )
    ctes.append(cte)
    params += cte_params
    names, values, parameter_fields, columns = _resolve_prepared_columns()
    params += [
        now
        if f.attname == "resolved_timestamp"
        else f.get_db_prep_save(f.get_default(), connection)
        for f in parameter_fields
    ]
    ctes.append(
        f"resolution AS (INSERT INTO {Resolution._meta.db_table} ({names}) "
        f"SELECT {values} FROM gate g LEFT JOIN delivered d "
        "ON d.prepared_transaction_offset = g.half_commit_log_offset "
        "WHERE g.state <> %s OR d.commit_log_offset IS NOT NULL RETURNING transaction_id)"
    )
    params += [TransactionState.COMMITTED, now]
    sql = (
        f"WITH {', '.join(ctes)} UPDATE {table} t SET state = g.state, "
        "resolved_by = g.resolved_by, resolved_timestamp = %s, next_check_timestamp = NULL, "
        "queue_offset = COALESCE(d.queue_offset, t.queue_offset) FROM gate g "
        "JOIN resolution r ON r.transaction_id = g.transaction_id LEFT JOIN delivered d "
        "ON d.prepared_transaction_offset = g.half_commit_log_offset "
        f"WHERE t.transaction_id = g.transaction_id RETURNING {columns}"
    )
    return sql, params


@functools.cache
def _resolve_prepared_columns() -> tuple[str, str, tuple[Any, ...], str]:
    """``_resolve_sql``'s constant parts, worked out once per process: the quoted
    ``Resolution`` columns written, the values selected for them (a ``gate`` column or a
    parameter), the fields whose values are parameters (``resolved_timestamp``: now; the
    others: their defaults), and the ``Transaction`` columns returned."""
    names, values, parameter_fields = [], [], []
    for f in Resolution._meta.concrete_fields:
        if f.primary_key:
            continue
        names.append(connection.ops.quote_name(f.column))
        if f.attname in _RESOLUTION_FROM_GATE:
            values.append(f"g.{_RESOLUTION_FROM_GATE[f.attname]}")
        else:
            values.append("%s")
            parameter_fields.append(f)
    columns = ", ".join(f"t.{f.column}" for f in Transaction._meta.concrete_fields)
    return ", ".join(names), ", ".join(values), tuple(parameter_fields), columns


# The Resolution columns that come from the locked transaction row and its item (``gate``).
_RESOLUTION_FROM_GATE = {
    "transaction_id": "transaction_id",
    "half_queue_id": "half_queue_id",
    "half_queue_offset": "half_queue_offset",
    "action": "action",
    "resolved_by": "resolved_by",
    "reason": "reason",
}


def transaction_discard(tx: Transaction, *, reason: str) -> None:
    """Discard a locked PREPARED transaction: copy its half message to
    ``TRANS_CHECK_MAX_TIME_TOPIC`` and mark it DISCARDED (RocketMQ
    ``AbstractTransactionalMessageCheckListener.resolveDiscardMsg``, 4.5.2+). Never delivered;
    an operator may still commit or roll it back.

    The copy (``message_copy``, ``sys_flag`` TRANSACTION_NOT_TYPE, queue 0) carries the half
    message's properties plus TRANSACTION_CHECK_TIMES, DISCARD_REASON and HALF_QUEUE_OFFSET.
    A ``discarded`` event (actor ``scan``, outcome the reason) is journalled and announced.

    Runs inside the caller's database transaction with ``tx`` locked (select_for_update).
    ``reason`` is a ``DiscardReason`` (``check_max`` or ``file_reserved_time``).
    """
    now = now_ms()
    half = Message.objects.get(pk=tx.half_commit_log_offset)
    props = {
        **half.properties,
        PROPERTY_TRANSACTION_CHECK_TIMES: str(tx.check_times),
        PROPERTY_DISCARD_REASON: reason,
        PROPERTY_HALF_QUEUE_OFFSET: str(tx.half_queue_offset),
    }
    message_copy(
        half,
        topic=CHECK_MAX_TIME_TOPIC,
        queue_id=0,
        properties=props,
        sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
        system_queue_nums=1,
    )
    tx.discard_reason = reason
    _transaction_close(
        tx,
        state=TransactionState.DISCARDED,
        resolved_by=ResolvedBy.DISCARD,
        now=now,
        also=["discard_reason"],
    )
    transaction_event_record(
        tx, TransactionEvent.Kind.DISCARDED, timestamp=now, actor="scan", outcome=reason
    )
    transaction_announce(tx, "discarded")
    logger.info("discarded %s after %d checks (%s)", tx.transaction_id, tx.check_times, reason)


def _transaction_close(
    tx: Transaction, *, state: str, resolved_by: str, now: int, also: list[str]
) -> None:
    """Save ``tx`` as no longer PREPARED: its new ``state``, who ended it and when (ms), and no
    next check; ``also`` names the other fields the caller changed."""
    tx.state = state
    tx.resolved_by = resolved_by
    tx.resolved_timestamp = now
    tx.next_check_timestamp = None
    tx.save(
        update_fields=["state", "resolved_by", "resolved_timestamp", "next_check_timestamp", *also]
    )

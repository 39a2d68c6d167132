"""How a PREPARED transaction ends: resolved (commit or rollback, by its producer, a check
answer or an operator) or discarded by the scan; and the journal and announcement of every
change of a transaction (RocketMQ EndTransactionProcessor.endMessageTransaction,
TransactionalMessageServiceImpl.deletePrepareMessage,
AbstractTransactionalMessageCheckListener.resolveDiscardMsg).

Every function here runs inside the caller's database transaction with the transaction row
locked (``broker.services.transactions.transaction_get_locked``).
"""

from __future__ import annotations

import logging
from typing import Any

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
from broker.events import TransactionChange, transaction_change_publish
from broker.models import Message, Resolution, Transaction, TransactionEvent, now_ms
from broker.rules.states import (
    ResolvedBy,
    ResolvingAction,
    TransactionState,
    resolution_of_action,
    state_of_action,
)
from broker.services.ops import op_buffer_note
from broker.services.storage import (
    message_copy,
    message_copy_cte,
    message_deliver_cte,
    message_visible_on_commit,
)

logger = logging.getLogger("halfmoon.transactions")

# Properties stripped when a half message is re-stored on its real topic
# (EndTransactionProcessor.endMessageTransaction clears REAL_TOPIC and REAL_QID).
_HALF_ONLY_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED)


def transaction_resolve_locked(
    tx: Transaction, *, action: ResolvingAction, resolved_by: str, reason: str
) -> None:
    """Deliver (commit) or drop (rollback) a transaction and journal its resolution for the
    Op log: the one place a transaction is resolved (producers, checks and operators).

    A commit copies the half message (``message_copy``) to its real topic and queue, without
    the half-only properties (REAL_TOPIC, REAL_QID, TRAN_MSG) and with ``sys_flag``
    TRANSACTION_COMMIT_TYPE; a rollback delivers nothing. Either way a ``Resolution`` row is
    written, from which ``broker.services.ops.op_flush`` writes the Op message (RIP-50) after
    this database transaction commits.

    ``tx`` must be PREPARED (or DISCARDED, for an operator) and locked with
    ``select_for_update`` inside the caller's database transaction; ``resolved_by`` is one of
    ``ResolvedBy``. The unique constraints on ``Resolution`` and
    ``Message.prepared_transaction_offset`` refuse a second resolution (IntegrityError).

    Raises:
        KeyError: ``action`` is not ``commit`` or ``rollback``.
    """
    now = now_ms()
    state = state_of_action(action)
    if connection.vendor == "postgresql":
        _resolve_postgresql(tx, action=action, resolved_by=resolved_by, reason=reason, now=now)
        op_buffer_note(half_queue_id=tx.half_queue_id, half_queue_offset=tx.half_queue_offset)
        transaction_announce(tx, "resolved")
        return
    if state == TransactionState.COMMITTED:
        half = Message.objects.get(pk=tx.half_commit_log_offset)
        props = {k: v for k, v in half.properties.items() if k not in _HALF_ONLY_PROPERTIES}
        delivered = message_copy(
            half,
            topic=tx.topic,
            queue_id=tx.queue_id,
            properties=props,
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=half.commit_log_offset,
        )
        tx.queue_offset = delivered.queue_offset
    Resolution.objects.create(
        transaction=tx,
        half_queue_id=tx.half_queue_id,
        half_queue_offset=tx.half_queue_offset,
        action=resolution_of_action(action),
        resolved_by=resolved_by,
        reason=reason,
        resolved_timestamp=now,
    )
    op_buffer_note(half_queue_id=tx.half_queue_id, half_queue_offset=tx.half_queue_offset)
    _transaction_close(tx, state=state, resolved_by=resolved_by, now=now, also=["queue_offset"])
    transaction_announce(tx, "resolved")


def _resolve_postgresql(
    tx: Transaction, *, action: ResolvingAction, resolved_by: str, reason: str, now: int
) -> None:
    """PostgreSQL: the writes of ``transaction_resolve_locked`` in one statement (one round
    trip, no half message read back): for a commit the copy of the half message to its real
    queue (``message_copy_cte``, as ``message_copy`` without the half-only properties), then the
    ``Resolution`` row and the transaction's new state (as ``_transaction_close``). Sets the
    saved fields on ``tx``.

    Raises:
        LookupError: the half message or the real queue is missing; the caller's database
            transaction must roll back (a queue counter may have moved).
        IntegrityError: a second resolution (``Resolution`` or delivery constraints).
    """
    state = state_of_action(action)
    commit = state == TransactionState.COMMITTED
    ctes: list[str] = []
    params: list[Any] = []
    if commit:
        cte, cte_params = message_copy_cte(
            source_commit_log_offset=tx.half_commit_log_offset,
            topic=tx.topic,
            queue_id=tx.queue_id,
            drop_properties=_HALF_ONLY_PROPERTIES,
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=tx.half_commit_log_offset,
            name="delivered",
        )
        ctes.append(cte)
        params += cte_params
    resolution = Resolution(
        transaction=tx,
        half_queue_id=tx.half_queue_id,
        half_queue_offset=tx.half_queue_offset,
        action=resolution_of_action(action),
        resolved_by=resolved_by,
        reason=reason,
        resolved_timestamp=now,
    )
    fields = [f for f in Resolution._meta.concrete_fields if not f.primary_key]
    params += [f.get_db_prep_save(getattr(resolution, f.attname), connection) for f in fields]
    ctes.append(
        f"resolution AS (INSERT INTO {Resolution._meta.db_table} "
        f"({', '.join(connection.ops.quote_name(f.column) for f in fields)}) "
        f"SELECT {', '.join(['%s'] * len(fields))}{' FROM delivered' if commit else ''} "
        "RETURNING 1)"
    )
    if commit:
        queue_offset, sources = "delivered.queue_offset", "resolution, delivered"
    else:
        queue_offset, sources = "%s", "resolution"
    sql = (
        f"WITH {', '.join(ctes)} UPDATE {Transaction._meta.db_table} SET state = %s, "
        "resolved_by = %s, resolved_timestamp = %s, next_check_timestamp = NULL, "
        f"queue_offset = {queue_offset} FROM {sources} WHERE transaction_id = %s "
        f"RETURNING {Transaction._meta.db_table}.queue_offset"
    )
    params += [state, resolved_by, now]
    if not commit:
        params.append(tx.queue_offset)
    params.append(tx.transaction_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise LookupError(
            f"transaction {tx.transaction_id}: no half message at commit log offset "
            f"{tx.half_commit_log_offset} or no queue {tx.topic}#{tx.queue_id}"
        )
    if commit:
        message_visible_on_commit(tx.topic)
    tx.queue_offset = row[0]
    tx.state = state
    tx.resolved_by = resolved_by
    tx.resolved_timestamp = now
    tx.next_check_timestamp = None


def transaction_resolve_prepared(
    *,
    transaction_id: str,
    producer_group: str,
    action: ResolvingAction,
    resolved_by: str,
    reason: str,
) -> Transaction | None:
    """PostgreSQL, outside any database transaction: resolve ``transaction_id`` if it is
    PREPARED and was sent by ``producer_group``, in one statement that is its own database
    transaction (no BEGIN, no separate ``SELECT ... FOR UPDATE``, no COMMIT round trips).

    The statement locks the row (``SELECT ... FOR UPDATE`` in its first CTE; under READ
    COMMITTED a row changed meanwhile by a concurrent end is re-read and, no longer PREPARED,
    not returned), then writes what ``transaction_resolve_locked`` writes: for a commit the
    copy of the half message to its real queue (``message_deliver_cte``: the queue counter
    moves only together with the copy, so offsets stay gap-free), the ``Resolution`` row (Op
    message source, unique per transaction) and the transaction's new state. The Op buffer note
    and the announcement follow as in ``transaction_resolve_locked``.

    Returns:
        the resolved transaction, or None when nothing was written: unknown id, another
        producer group, not PREPARED, a missing half message or queue, or a constraint refusing
        a second resolution. The caller then takes the locked path
        (``broker.services.transactions.transaction_end``), which answers each of these as the
        contract says (404, 403, 200 for the same action again, 409).

    Raises:
        RuntimeError: called inside ``transaction.atomic()``.
    """
    if connection.in_atomic_block:  # a failed statement would end the caller's transaction
        raise RuntimeError("transaction_resolve_prepared runs outside transaction.atomic()")
    state = state_of_action(action)
    commit = state == TransactionState.COMMITTED
    table = Transaction._meta.db_table
    columns = [f.column for f in Transaction._meta.concrete_fields]
    ctes = [
        "gate AS (SELECT transaction_id, topic, queue_id, half_queue_id, half_queue_offset, "
        f"half_commit_log_offset FROM {table} WHERE transaction_id = %s AND producer_group = %s "
        "AND state = %s FOR UPDATE)"
    ]
    params: list[Any] = [transaction_id, producer_group, TransactionState.PREPARED]
    if commit:
        cte, cte_params = message_deliver_cte(
            source="gate",
            drop_properties=_HALF_ONLY_PROPERTIES,
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
            name="delivered",
        )
        ctes.append(cte)
        params += cte_params
    resolution = Resolution(
        action=resolution_of_action(action),
        resolved_by=resolved_by,
        reason=reason,
        resolved_timestamp=now_ms(),
    )
    names, values = [], []
    for f in Resolution._meta.concrete_fields:
        if f.primary_key:
            continue
        names.append(connection.ops.quote_name(f.column))
        if f.attname in _RESOLUTION_FROM_GATE:
            values.append(f"gate.{_RESOLUTION_FROM_GATE[f.attname]}")
        else:
            values.append("%s")
            params.append(f.get_db_prep_save(getattr(resolution, f.attname), connection))
    ctes.append(
        f"resolution AS (INSERT INTO {Resolution._meta.db_table} ({', '.join(names)}) "
        f"SELECT {', '.join(values)} FROM gate{', delivered' if commit else ''} RETURNING 1)"
    )
    queue_offset = "delivered.queue_offset" if commit else "t.queue_offset"
    sql = (
        f"WITH {', '.join(ctes)} UPDATE {table} t SET state = %s, resolved_by = %s, "
        "resolved_timestamp = %s, next_check_timestamp = NULL, "
        f"queue_offset = {queue_offset} FROM resolution{', delivered' if commit else ''} "
        f"WHERE t.transaction_id = %s RETURNING {', '.join(f't.{c}' for c in columns)}"
    )
    params += [state, resolved_by, resolution.resolved_timestamp, transaction_id]
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    except IntegrityError:  # a second resolution: the locked path says what ended it
        return None
    if row is None:
        return None
    tx = Transaction.from_db(
        connection.alias, [f.attname for f in Transaction._meta.concrete_fields], row
    )
    if commit:
        message_visible_on_commit(tx.topic)
    op_buffer_note(half_queue_id=tx.half_queue_id, half_queue_offset=tx.half_queue_offset)
    transaction_announce(tx, "resolved")
    return tx


# The Resolution columns that come from the locked transaction row (``gate``).
_RESOLUTION_FROM_GATE = {
    "transaction_id": "transaction_id",
    "half_queue_id": "half_queue_id",
    "half_queue_offset": "half_queue_offset",
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


def transaction_event_record(
    tx: Transaction,
    kind: str,
    *,
    timestamp: int,
    actor: str,
    outcome: str = "",
    detail: dict[str, Any] | None = None,
) -> TransactionEvent:
    """Append a ``TransactionEvent`` of ``kind`` (a ``TransactionEvent.Kind``) for ``tx`` to
    the check and operator journal, with the transaction's current ``check_times``.

    ``timestamp`` is in ms; ``actor`` says who (``scan``, ``check``, ``operator:<key name>``);
    ``outcome`` and ``detail`` as the model documents them for each kind.
    """
    return TransactionEvent.objects.create(
        transaction_id=tx.pk,
        kind=kind,
        timestamp=timestamp,
        check_times=tx.check_times,
        outcome=outcome,
        actor=actor,
        detail=detail or {},
    )


def transaction_announce(tx: Transaction, kind: str) -> None:
    """After the current database transaction commits, announce that ``tx`` changed
    (``broker.events``; the console relays it). ``kind``: resolved, discarded, resumed,
    check_sent, check_undelivered. Nothing is announced for a write that rolls back."""
    event = TransactionChange(
        type="transaction.event",
        kind=kind,
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        topic=tx.topic,
        state=tx.state,
        check_times=tx.check_times,
        timestamp=now_ms(),
    )
    transaction.on_commit(lambda: transaction_change_publish(event))

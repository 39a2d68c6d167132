"""End-transaction (RocketMQ EndTransactionProcessor): a producer's commit, rollback or UNKNOW
for a half message, in one statement when it can, else on the locked row; what an end that
comes too late is answered and journalled. The resolution itself (the delivered message, the
Op log's journal, the announcement) is ``broker.services.transactions.resolution``'s."""

from __future__ import annotations

from django.db import connection, transaction

from broker.errors import Forbidden, TransactionAlreadyResolved
from broker.models import Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.rules.states import (
    END_ACTIONS,
    RESOLVING_ACTIONS,
    EndAction,
    ResolvedBy,
    TransactionState,
    resolution_of_action,
    state_of_action,
)
from broker.selectors.queries import first_or_not_found
from broker.services.commitlog.validation import action_validate
from broker.services.operations.audit import ended_refusal
from broker.services.transactions.events import transaction_event_record
from broker.services.transactions.resolution import (
    transaction_resolve_locked,
    transaction_resolve_prepared,
)


def transaction_get_locked(transaction_id: str) -> Transaction:
    """The transaction row, locked (``SELECT ... FOR UPDATE``) until the caller's database
    transaction ends: every change of a transaction's state starts here.

    Raises:
        NotFound: ``transaction_not_found``.
    """
    return first_or_not_found(
        Transaction.objects.select_for_update().filter(pk=transaction_id),
        "transaction",
        transaction_id,
    )


def transaction_end(
    *,
    transaction_id: str,
    producer_group: str,
    action: EndAction,
    from_transaction_check: bool = False,
    remark: str | None = None,
) -> Transaction:
    """End a transaction as its producer reports (RocketMQ END_TRANSACTION).

    commit re-stores the half message on its real topic and queue with the same msg_id and
    writes an Op message; rollback writes the Op message only; unknown changes nothing. The
    same action again returns the same state and stores nothing (RocketMQ #5574 stores twice).
    Concurrent ends are serialised by a row lock on the transaction; the unique constraints on
    ``Resolution`` and ``Message.prepared_transaction_offset`` are the backstop. Outside a
    caller's database transaction, a commit or rollback of a PREPARED transaction is one
    statement (``transaction_resolve_prepared``, which takes the same row lock); every
    other case takes the locked path below; unknown reads the row without a lock.

    Returns:
        the transaction after the end (``state``, ``queue_offset`` of the delivered message).

    Raises:
        InvalidInput: ``invalid_action`` (not one of ``END_ACTIONS``).
        NotFound: ``transaction_not_found``.
        Forbidden: ``producer_group_mismatch`` (not the group that sent the half message).
        TransactionAlreadyResolved: the other action after resolution, or after a discard;
            ``details`` name what ended it (``broker.services.operations.audit.transaction_ended``). The
            refused end is journalled first (``end_refused``, see ``_end_refused_record``).
    """
    action_validate(action, END_ACTIONS)
    by = end_resolved_by(from_transaction_check)
    if action in RESOLVING_ACTIONS and not connection.in_atomic_block:
        # The common case in one statement; anything else (not PREPARED, another group, not
        # found) falls through to the locked path, which answers it.
        resolved = transaction_resolve_prepared(
            transaction_id=transaction_id,
            producer_group=producer_group,
            action=action,
            resolved_by=by,
            reason=remark or "",
        )
        if resolved is not None:
            return resolved
    if action not in RESOLVING_ACTIONS:  # unknown changes nothing: one read, no lock
        tx = first_or_not_found(
            Transaction.objects.filter(pk=transaction_id), "transaction", transaction_id
        )
        _producer_group_check(tx, producer_group)
        return tx
    try:
        with transaction.atomic():
            tx = transaction_get_locked(transaction_id)
            _producer_group_check(tx, producer_group)
            target = state_of_action(action)
            if tx.state == target:
                return tx
            if tx.state != TransactionState.PREPARED:
                raise ended_refusal(tx)
            transaction_resolve_locked(tx, action=action, resolved_by=by, reason=remark or "")
    except TransactionAlreadyResolved:
        _end_refused_record(tx, action=action, actor=by)
        raise
    return tx


def end_resolved_by(from_transaction_check: bool) -> str:
    """Who a producer's end is journalled as resolved by: ``check`` when it answers a
    back-check (``fromTransactionCheck``), else ``producer`` (``ResolvedBy``)."""
    return ResolvedBy.CHECK if from_transaction_check else ResolvedBy.PRODUCER


def _producer_group_check(tx: Transaction, producer_group: str) -> None:
    """Raises Forbidden ``producer_group_mismatch`` unless ``producer_group`` sent ``tx``."""
    if tx.producer_group != producer_group:
        raise Forbidden(
            f"Transaction {tx.transaction_id} was sent by another producer group.",
            code="producer_group_mismatch",
            details={"transaction_id": tx.transaction_id},
        )


def _end_refused_record(tx: Transaction, *, action: str, actor: str) -> None:
    """Journal a producer's or check answer's end refused because ``tx`` had already ended
    (``TransactionEvent`` ``end_refused``: actor ``producer`` or ``check``, outcome COMMIT or
    ROLLBACK, detail ``state``, ``resolved_by`` and ``resolved_timestamp`` of what ended it), in
    its own database transaction after the refused one rolled back. A late end after a discard
    is what the reconciliation reports as ``late_end`` (``broker.rules.anomalies``). Not
    announced: the transaction did not change."""
    with transaction.atomic():
        transaction_event_record(
            tx,
            TransactionEvent.Kind.END_REFUSED,
            timestamp=now_ms(),
            actor=actor,
            outcome=resolution_of_action(action),
            detail={
                "state": tx.state,
                "resolved_by": tx.resolved_by,
                "resolved_timestamp": tx.resolved_timestamp,
            },
        )

"""A transaction's journal (``TransactionEvent``: what happened to it besides its resolution) and
its announcements to whoever watches (the console's live feed), sent once the database
transaction that changed it commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from broker.models import Transaction, TransactionEvent
from broker.plumbing.events import TransactionChange, transaction_changes_publish
from broker.rules.clock import now_ms


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
    (``transactions_announce`` of one transaction)."""
    transactions_announce([tx], kind)


def transactions_announce(txs: Sequence[Transaction], kind: str) -> None:
    """After the current database transaction commits, announce that each of ``txs`` changed
    (``broker.plumbing.events``; the console relays it), in order, with one hand-over to the publisher
    however many they are. ``kind``: prepared, resolved, discarded, resumed, check_sent,
    check_undelivered, check_requested. Nothing is announced for a write that rolls back."""
    if not txs:
        return
    timestamp = now_ms()
    events = [
        TransactionChange(
            type="transaction.event",
            kind=kind,
            transaction_id=tx.transaction_id,
            producer_group=tx.producer_group,
            topic=tx.topic,
            state=tx.state,
            check_times=tx.check_times,
            timestamp=timestamp,
        )
        for tx in txs
    ]
    transaction.on_commit(lambda: transaction_changes_publish(events))

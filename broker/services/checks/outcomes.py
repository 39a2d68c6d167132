"""Step 3 of a check round: count the delivered checks and apply their answers (RocketMQ
``EndTransactionProcessor`` for a ``fromTransactionCheck`` end; ``resolveHalfMsg``'s check
count), retry undelivered checks, and back off producer groups that do not answer.

A round's outcomes are applied in batches of ``APPLY_BATCH_SIZE``, one database transaction
each: the batch's transaction rows are locked in primary-key order (``SELECT ... FOR UPDATE``),
their counts and next checks written with one ``UPDATE ... FROM unnest(...)``, the check journal
with one ``INSERT``, the groups' reachability with one statement per group, and the COMMIT /
ROLLBACK answers resolved through ``transaction_resolve_locked`` on the locked rows, in the order
of their real topic and queue (the offset counters a commit locks are taken in one global
order). A
producer's end racing an answer waits for the lock (or the answer's batch waits for the end):
exactly one of them resolves the transaction."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from broker.conf import conf
from broker.errors import HalfmoonError
from broker.models import ProducerGroup, Transaction, TransactionEvent
from broker.rules.checks import backoff_ms
from broker.rules.clock import now_ms
from broker.rules.states import (
    RESOLVING_ACTIONS,
    CheckAnswer,
    ResolvedBy,
    TransactionState,
    state_of_action,
)
from broker.services.checks.payload import CheckOutcome
from broker.services.transactions.end import transaction_end
from broker.services.transactions.events import transaction_announce
from broker.services.transactions.resolution import transaction_resolve_locked

logger = logging.getLogger("halfmoon.checks")

APPLY_BATCH_SIZE = 500
"""Outcomes applied per database transaction. One transaction per batch instead of one per check
is what lets a round keep up with the producers' answers; the bound keeps the row locks (and,
for committed answers, the real queues' offset counters) short enough that producers' ends and
sends do not queue behind a whole round."""


def check_delivered_record(
    *,
    transaction_id: str,
    producer_group: str,
    channel: str,
    now: int,
    detail: dict[str, Any],
    outcome: str = "",
) -> int:
    """Count one delivered check of ``transaction_id`` in ``check_times`` and the check journal
    (``outcome``: the producer's answer, e.g. COMMIT_MESSAGE or TIMEOUT; empty for a poll
    hand-out; ``channel``: ``poll``, the hand-out to a polling producer; a round's checks are
    journalled by ``check_outcomes_apply`` with theirs, ``http`` or ``telemetry``), and mark its
    group reachable.

    Returns the transaction's check_times after counting. Inside the caller's atomic().
    The HTTP checks of a round are counted in bulk by ``check_outcomes_apply`` with the same
    effects.
    """
    Transaction.objects.filter(pk=transaction_id).update(
        check_times=F("check_times") + 1, last_check_timestamp=now, undelivered_checks=0
    )
    tx = Transaction.objects.get(pk=transaction_id)
    TransactionEvent.objects.create(
        transaction_id=tx.pk,
        kind=TransactionEvent.Kind.CHECK_SENT,
        timestamp=now,
        check_times=tx.check_times,
        outcome=outcome,
        actor=channel,
        detail=detail,
    )
    transaction_announce(tx, "check_sent")
    _groups_reachable([producer_group])
    return tx.check_times


def check_outcomes_apply(outcomes: list[CheckOutcome], *, now: int | None = None) -> None:
    """Record each outcome and apply its answer, at ``now`` (ms; default the clock), in batches
    of ``APPLY_BATCH_SIZE`` outcomes, one database transaction each.

    A delivered check counts in ``check_times`` (``last_check_timestamp`` = ``now``, the
    undelivered streak reset; journal ``check_sent`` with the answer, TIMEOUT or INVALID, the
    status code, error and latency) and marks its group reachable; a COMMIT/ROLLBACK answer to a
    transaction still PREPARED resolves it with ``resolved_by=check`` through
    ``transaction_resolve_locked`` on its locked row. An answer to a transaction ended meanwhile
    goes through ``transaction_end`` after the batch (the same action again changes nothing;
    the other one is refused and journalled ``end_refused``). An undelivered check of a PREPARED
    transaction is not counted: it is due again after ``broker.rules.checks.backoff_ms`` of its
    undelivered streak (from ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check
    interval), journalled ``check_undelivered`` (with ``target_refused`` when the check-target
    rule stopped it), and its group is marked unreachable with the error. A group's
    reachability ends as its last outcome of the round says. Groups with no answer at all are
    backed off (``_group_health_record``). Outcomes of transactions that no longer exist are
    skipped.

    Raises whatever the database raises; a batch that fails leaves nothing of itself (its
    transactions are due again one interval after the claim).
    """
    now = now if now is not None else now_ms()
    ordered = sorted(outcomes, key=lambda o: o.job.transaction_id)
    refused_ends: list[CheckOutcome] = []
    for start in range(0, len(ordered), APPLY_BATCH_SIZE):
        refused_ends += _batch_apply(ordered[start : start + APPLY_BATCH_SIZE], now=now)
    for outcome in refused_ends:
        _end_through_service(outcome)
    _groups_reachability_record(outcomes, now=now)
    _group_health_record(outcomes, now=now)


@dataclass
class _Counted:
    """The new values of one transaction row of a batch (``UPDATE ... FROM unnest``)."""

    tx: Transaction
    events: list[TransactionEvent] = field(default_factory=list)
    announce: str = ""


def _batch_apply(batch: list[CheckOutcome], *, now: int) -> list[CheckOutcome]:
    """Apply ``batch`` (sorted by transaction id) in one database transaction; return the
    resolving answers to transactions that had already ended (for ``transaction_end``)."""
    deferred: list[CheckOutcome] = []
    with transaction.atomic():
        locked = {
            tx.pk: tx
            for tx in Transaction.objects.select_for_update()
            .filter(pk__in=[o.job.transaction_id for o in batch])
            .order_by("pk")
        }
        changed: dict[str, _Counted] = {}
        resolving: list[CheckOutcome] = []
        for outcome in batch:
            tx = locked.get(outcome.job.transaction_id)
            if tx is None:
                logger.info("check outcome of %s: no such transaction", outcome.job.transaction_id)
                continue
            if outcome.delivered:
                _count_delivered(tx, outcome, now=now, into=changed)
                if outcome.action is not None and outcome.action in RESOLVING_ACTIONS:
                    resolving.append(outcome)
            elif tx.state == TransactionState.PREPARED:
                _retry_undelivered(tx, outcome, now=now, into=changed)
        _rows_write([c.tx for c in changed.values()])
        TransactionEvent.objects.bulk_create([e for c in changed.values() for e in c.events])
        for counted in changed.values():
            transaction_announce(counted.tx, counted.announce)
        # Commits take their real queue's offset counter (``transaction_resolve_locked``) until
        # the batch commits: taken in (topic, queue, id) order, so concurrent batches cannot
        # deadlock.
        resolving.sort(key=lambda o: resolution_lock_order(locked[o.job.transaction_id]))
        for outcome in resolving:
            tx = locked[outcome.job.transaction_id]
            if tx.state == TransactionState.PREPARED and tx.producer_group == (
                outcome.job.producer_group
            ):
                transaction_resolve_locked(
                    tx, action=outcome.action, resolved_by=ResolvedBy.CHECK, reason=""
                )
            elif tx.state != state_of_action(outcome.action):
                deferred.append(outcome)
    return deferred


def resolution_lock_order(tx: Transaction) -> tuple[str, int, str]:
    """The one order in which every batch (a check round's outcomes, an end-batch) resolves
    its locked transactions: ``(real topic, queue_id, transaction id)``. A commit holds its real
    queue's offset counter until the batch commits, so two batches taking counters in this
    same order cannot deadlock."""
    return (tx.topic, tx.queue_id, tx.pk)


def _count_delivered(
    tx: Transaction, outcome: CheckOutcome, *, now: int, into: dict[str, _Counted]
) -> None:
    """Count a delivered check on the locked ``tx`` in memory and journal it."""
    tx.check_times += 1
    tx.last_check_timestamp = now
    tx.undelivered_checks = 0
    counted = into.setdefault(tx.pk, _Counted(tx))
    counted.announce = "check_sent"
    counted.events.append(
        TransactionEvent(
            transaction_id=tx.pk,
            kind=TransactionEvent.Kind.CHECK_SENT,
            timestamp=now,
            check_times=tx.check_times,
            outcome=outcome.label,
            actor=outcome.job.channel,
            detail={
                "status_code": outcome.status_code,
                "error": outcome.error,
                "latency_ms": outcome.latency_ms,
                **({"client_id": outcome.client_id} if outcome.client_id else {}),
            },
        )
    )


def _retry_undelivered(
    tx: Transaction, outcome: CheckOutcome, *, now: int, into: dict[str, _Counted]
) -> None:
    """An undelivered check of the locked PREPARED ``tx``: not counted, due again after its
    backoff, journalled (with the check-target rule as ``target_refused`` if one stopped it)."""
    tx.undelivered_checks += 1
    backoff = _backoff_ms(tx.undelivered_checks)
    tx.next_check_timestamp = now + backoff
    counted = into.setdefault(tx.pk, _Counted(tx))
    counted.announce = counted.announce or "check_undelivered"
    counted.events.append(
        TransactionEvent(
            transaction_id=tx.pk,
            kind=TransactionEvent.Kind.CHECK_UNDELIVERED,
            timestamp=now,
            check_times=tx.check_times,
            outcome=CheckAnswer.UNDELIVERED,
            actor=outcome.job.channel,
            detail={
                "error": outcome.error,
                "retry_in_ms": backoff,
                **({"target_refused": outcome.refused} if outcome.refused else {}),
            },
        )
    )


def _rows_write(rows: list[Transaction]) -> None:
    """Write the check counters of the locked ``rows`` (check_times, last_check_timestamp,
    undelivered_checks, next_check_timestamp) in one statement, ``UPDATE ... FROM
    unnest(...)``."""
    if not rows:
        return
    table = Transaction._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} AS t SET check_times = v.ct, last_check_timestamp = v.lc,"  # noqa: S608 - the model's table
            " undelivered_checks = v.uc, next_check_timestamp = v.nc"
            " FROM unnest(%s::varchar[], %s::int[], %s::bigint[], %s::int[], %s::bigint[])"
            " AS v(tid, ct, lc, uc, nc) WHERE t.transaction_id = v.tid",
            [
                [tx.pk for tx in rows],
                [tx.check_times for tx in rows],
                [tx.last_check_timestamp for tx in rows],
                [tx.undelivered_checks for tx in rows],
                [tx.next_check_timestamp for tx in rows],
            ],
        )


def _end_through_service(outcome: CheckOutcome) -> None:
    """A COMMIT/ROLLBACK answer to a transaction that ended otherwise before its batch: through
    ``transaction_end`` (``from_transaction_check``), which journals the refusal."""
    job = outcome.job
    try:
        transaction_end(
            transaction_id=job.transaction_id,
            producer_group=job.producer_group,
            action=outcome.action,
            from_transaction_check=True,
        )
    except HalfmoonError as exc:
        logger.info("check answer for %s not applied: %s", job.transaction_id, exc.message)


def _groups_reachable(names: Iterable[str]) -> None:
    """Mark the producer groups ``names`` reachable (no-op for those already so)."""
    ProducerGroup.objects.filter(name__in=list(names)).exclude(
        unreachable_since__isnull=True, last_check_error=""
    ).update(unreachable_since=None, last_check_error="")


def _groups_reachability_record(outcomes: list[CheckOutcome], *, now: int) -> None:
    """Each group's reachability as its last outcome of the round says (in the order of
    ``outcomes``): delivered -> reachable; undelivered -> unreachable since ``now`` (or since
    earlier, if it was already and nothing of this round reached it), with that check's error."""
    last: dict[str, CheckOutcome] = {}
    reached: set[str] = set()
    for outcome in outcomes:
        last[outcome.job.producer_group] = outcome
        if outcome.delivered:
            reached.add(outcome.job.producer_group)
    _groups_reachable(name for name, o in last.items() if o.delivered)
    for name, outcome in last.items():
        if outcome.delivered:
            continue
        groups = ProducerGroup.objects.filter(name=name)
        if name in reached:
            groups.update(unreachable_since=now, last_check_error=outcome.error[:500])
            continue
        groups.filter(unreachable_since__isnull=True).update(unreachable_since=now)
        groups.update(last_check_error=outcome.error[:500])


def _backoff_ms(failures: int) -> int:
    """The retry delay after ``failures`` failures in a row (1 on the first): from
    ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS``, doubling, at most the check interval."""
    return backoff_ms(
        failures,
        base_ms=conf.check_undelivered_backoff_ms,
        cap_ms=conf.transaction_check_interval_ms,
    )


def _group_health_record(outcomes: list[CheckOutcome], *, now: int) -> None:
    """Back a producer group off when none of its checks this round got an answer in time
    (all timed out or undelivered): no checks to it for ``broker.rules.checks.backoff_ms`` of
    its failed rounds (from ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check
    interval). One answer clears it. A dead producer thus costs one probe per backoff instead
    of a batch of timeouts per round, and cannot delay the checks of healthy groups. The first
    failed round since the last answer is kept as the group's ``unanswered_since`` (cleared by
    the answer too), for ``broker.rules.checks.group_down_since``."""
    answered: dict[str, bool] = {}
    for outcome in outcomes:
        ok = outcome.delivered and not outcome.timed_out
        answered[outcome.job.producer_group] = answered.get(outcome.job.producer_group, False) or ok
    for group, ok in answered.items():
        if ok:
            ProducerGroup.objects.filter(name=group).exclude(
                check_failures=0, check_backoff_until=None, unanswered_since=None
            ).update(check_failures=0, check_backoff_until=None, unanswered_since=None)
            continue
        with transaction.atomic():
            row = ProducerGroup.objects.select_for_update().filter(name=group).first()
            if row is None:
                continue
            row.check_failures += 1
            row.check_backoff_until = now + _backoff_ms(row.check_failures)
            if row.unanswered_since is None:
                row.unanswered_since = now
            row.save(update_fields=["check_failures", "check_backoff_until", "unanswered_since"])
        logger.warning(
            "producer group %s backed off until %d (%d failed rounds)",
            group,
            row.check_backoff_until,
            row.check_failures,
        )

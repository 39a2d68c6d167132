"""Step 3 of a check round: count the delivered checks and apply their answers (RocketMQ
``EndTransactionProcessor`` for a ``fromTransactionCheck`` end; ``resolveHalfMsg``'s check
count), retry undelivered checks, and back off producer groups that do not answer."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F

from broker.conf import conf
from broker.errors import HalfmoonError
from broker.models import ProducerGroup, Transaction, TransactionEvent, TransactionState, now_ms
from broker.rules.checks import backoff_ms
from broker.rules.states import RESOLVING_ACTIONS, CheckAnswer
from broker.services.checks.payload import CheckOutcome
from broker.services.transactions import transaction_announce, transaction_end

logger = logging.getLogger("halfmoon.checks")


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
    hand-out; ``channel``: ``http`` or ``poll``), and mark its group reachable.

    Returns the transaction's check_times after counting. Inside the caller's atomic().
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
    ProducerGroup.objects.filter(name=producer_group).exclude(
        unreachable_since__isnull=True, last_check_error=""
    ).update(unreachable_since=None, last_check_error="")
    return tx.check_times


def check_outcomes_apply(outcomes: list[CheckOutcome], *, now: int | None = None) -> None:
    """Record each outcome and apply its answer, at ``now`` (ms; default the clock).

    A delivered check counts in ``check_times`` (journal outcome: the answer, TIMEOUT or
    INVALID); a COMMIT/ROLLBACK answer ends the transaction with ``resolved_by=check`` through
    ``transaction_end`` (a transaction resolved meanwhile is left as it is). An undelivered one
    is retried after ``broker.rules.checks.backoff_ms`` (from
    ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check interval), uncounted, and marks
    its group unreachable. Groups with no answer at all are backed off.
    """
    now = now if now is not None else now_ms()
    for outcome in outcomes:
        if outcome.delivered:
            _delivered_apply(outcome, now=now)
        else:
            _undelivered_retry(outcome, now=now)
    _group_health_record(outcomes, now=now)


def _delivered_apply(outcome: CheckOutcome, *, now: int) -> None:
    job = outcome.job
    with transaction.atomic():
        check_delivered_record(
            transaction_id=job.transaction_id,
            producer_group=job.producer_group,
            channel="http",
            now=now,
            outcome=outcome.label,
            detail={
                "status_code": outcome.status_code,
                "error": outcome.error,
                "latency_ms": outcome.latency_ms,
            },
        )
    if outcome.action is not None and outcome.action in RESOLVING_ACTIONS:
        try:
            transaction_end(
                transaction_id=job.transaction_id,
                producer_group=job.producer_group,
                action=outcome.action,
                from_transaction_check=True,
            )
        except HalfmoonError as exc:
            logger.info("check answer for %s not applied: %s", job.transaction_id, exc.message)


def _undelivered_retry(outcome: CheckOutcome, *, now: int) -> None:
    """An undelivered check: not counted, due again after its backoff; the group unreachable."""
    job = outcome.job
    with transaction.atomic():
        tx = (
            Transaction.objects.select_for_update()
            .filter(pk=job.transaction_id, state=TransactionState.PREPARED)
            .first()
        )
        if tx is not None:
            tx.undelivered_checks += 1
            backoff = _backoff_ms(tx.undelivered_checks)
            tx.next_check_timestamp = now + backoff
            tx.save(update_fields=["undelivered_checks", "next_check_timestamp"])
            TransactionEvent.objects.create(
                transaction_id=tx.pk,
                kind=TransactionEvent.Kind.CHECK_UNDELIVERED,
                timestamp=now,
                check_times=tx.check_times,
                outcome=CheckAnswer.UNDELIVERED,
                actor="http",
                detail={"error": outcome.error, "retry_in_ms": backoff},
            )
            transaction_announce(tx, "check_undelivered")
        ProducerGroup.objects.filter(
            name=job.producer_group, unreachable_since__isnull=True
        ).update(unreachable_since=now)
        ProducerGroup.objects.filter(name=job.producer_group).update(
            last_check_error=outcome.error[:500]
        )


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
    of a batch of timeouts per round, and cannot delay the checks of healthy groups."""
    answered: dict[str, bool] = {}
    for outcome in outcomes:
        ok = outcome.delivered and not outcome.timed_out
        answered[outcome.job.producer_group] = answered.get(outcome.job.producer_group, False) or ok
    for group, ok in answered.items():
        if ok:
            ProducerGroup.objects.filter(name=group).exclude(
                check_failures=0, check_backoff_until=None
            ).update(check_failures=0, check_backoff_until=None)
            continue
        with transaction.atomic():
            row = ProducerGroup.objects.select_for_update().filter(name=group).first()
            if row is None:
                continue
            row.check_failures += 1
            row.check_backoff_until = now + _backoff_ms(row.check_failures)
            row.save(update_fields=["check_failures", "check_backoff_until"])
        logger.warning(
            "producer group %s backed off until %d (%d failed rounds)",
            group,
            row.check_backoff_until,
            row.check_failures,
        )

"""Why a transaction's (or a producer group's) next back-check happens when it does: reads the
transaction, its half message's CHECK_IMMUNITY_TIME_IN_SECONDS, its producer group's backoff and
reachability and the broker settings with their sources, and hands them to the one rule,
``broker.rules.check_explanation.explain_check`` (the transaction page, the producer group
page and ``GET /api/v1/transactions/{id}/check-explanation``,
``GET /api/v1/producer-groups/{name}/check-explanation``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from broker.conf import conf
from broker.constants import PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS
from broker.models import Message, ProducerGroup, Transaction
from broker.rules.broker_settings import BROKER_SETTINGS
from broker.rules.check_explanation import (
    CheckExplanation,
    CheckSettings,
    GroupState,
    PendingCheck,
    SourcedValue,
    explain_check,
    source_of,
)
from broker.rules.checks import check_immunity_valid
from broker.rules.clock import now_ms
from broker.rules.recovery import immunity_seconds as parse_immunity_seconds
from broker.rules.states import TransactionState
from broker.selectors.queries import first_or_not_found

_DEFAULTS = {spec.name: spec.default for spec in BROKER_SETTINGS}


@dataclass(frozen=True)
class TransactionCheckExplanation:
    """The explanation of one transaction's next check, with what it was computed from."""

    transaction_id: str
    producer_group: str
    state: str
    now: int
    explanation: CheckExplanation


@dataclass(frozen=True)
class GroupCheckExplanation:
    """The explanation of a producer group's next check: that of its pending transaction due
    first (``next_transaction_id``; None when it has none)."""

    producer_group: str
    pending: int
    next_transaction_id: str | None
    now: int
    explanation: CheckExplanation


def _sourced(attr: str) -> SourcedValue:
    """``conf.<attr>`` with its source: "default" when it equals the default of
    ``broker.rules.broker_settings.BROKER_SETTINGS``, else "setting" (set in the environment)."""
    value = getattr(conf, attr)
    return SourcedValue(value, source_of(value, _DEFAULTS[f"HALFMOON_{attr.upper()}"]))


def check_settings() -> CheckSettings:
    """The back-check settings in effect, each with its source."""
    return CheckSettings(
        transaction_timeout_ms=_sourced("transaction_timeout_ms"),
        check_interval_ms=_sourced("transaction_check_interval_ms"),
        check_max=_sourced("transaction_check_max"),
        file_reserved_hours=_sourced("file_reserved_hours"),
        undelivered_backoff_ms=_sourced("check_undelivered_backoff_ms"),
        group_max_in_flight=_sourced("check_group_max_in_flight"),
        group_max_per_second=_sourced("check_group_max_per_second"),
        scan_interval_ms=conf.check_scan_interval_ms,
    )


def _group_state(name: str) -> GroupState:
    group = ProducerGroup.objects.filter(name=name).first()
    if group is None:  # a group deleted under its transactions: nothing holds it back
        return GroupState()
    return GroupState(
        unreachable_since=group.unreachable_since,
        unanswered_since=group.unanswered_since,
        check_failures=group.check_failures,
        check_backoff_until=group.check_backoff_until,
    )


def _immunity_seconds(tx: Transaction) -> int | None:
    """The half message's valid CHECK_IMMUNITY_TIME_IN_SECONDS, else None."""
    props = (
        Message.objects.filter(pk=tx.half_commit_log_offset)
        .values_list("properties", flat=True)
        .first()
    )
    seconds = parse_immunity_seconds((props or {}).get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS))
    return seconds if seconds is not None and check_immunity_valid(seconds) else None


def _pending_check(tx: Transaction, *, now: int) -> PendingCheck:
    """``tx`` as the rule reads it. The checks of its group due before it (ordered as the
    claim orders them: next check time, then commit log offset) are counted only when it is
    due itself: those are the ones the group's caps make it wait behind."""
    pending = tx.state == TransactionState.PREPARED
    ahead_queue = ahead_group = 0
    if pending and tx.next_check_timestamp is not None and tx.next_check_timestamp <= now:
        ahead = Transaction.objects.filter(
            Q(next_check_timestamp__lt=tx.next_check_timestamp)
            | Q(
                next_check_timestamp=tx.next_check_timestamp,
                half_commit_log_offset__lt=tx.half_commit_log_offset,
            ),
            producer_group=tx.producer_group,
            state=TransactionState.PREPARED,
        )
        ahead_group = ahead.count()
        ahead_queue = ahead.filter(half_queue_id=tx.half_queue_id).count() if ahead_group else 0
    return PendingCheck(
        resolved=not pending,
        born_timestamp=tx.born_timestamp,
        check_times=tx.check_times,
        next_check_timestamp=tx.next_check_timestamp,
        last_check_timestamp=tx.last_check_timestamp,
        undelivered_checks=tx.undelivered_checks,
        immunity_seconds=_immunity_seconds(tx),
        due_ahead_in_queue=ahead_queue,
        due_ahead_in_group=ahead_group,
    )


def check_explanation_of_transaction(
    transaction_id: str, *, now: int | None = None
) -> TransactionCheckExplanation:
    """Why transaction ``transaction_id``'s next check happens when it does, at ``now`` (ms).

    Raises:
        NotFound: ``transaction_not_found``.
    """
    now = now_ms() if now is None else now
    tx = first_or_not_found(
        Transaction.objects.filter(pk=transaction_id), "transaction", transaction_id
    )
    explanation = explain_check(
        now=now,
        settings=check_settings(),
        group=_group_state(tx.producer_group),
        tx=_pending_check(tx, now=now),
    )
    return TransactionCheckExplanation(
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        state=tx.state,
        now=now,
        explanation=explanation,
    )


def check_explanation_of_producer_group(
    name: str, *, now: int | None = None
) -> GroupCheckExplanation:
    """Why producer group ``name``'s next check happens when it does, at ``now`` (ms): that of
    its pending transaction due first, with the group's backoff and reachability.

    Raises:
        NotFound: ``producer_group_not_found``.
    """
    now = now_ms() if now is None else now
    first_or_not_found(ProducerGroup.objects.filter(name=name), "producer_group", name)
    pending = Transaction.objects.filter(producer_group=name, state=TransactionState.PREPARED)
    first = pending.order_by("next_check_timestamp", "half_commit_log_offset").first()
    explanation = explain_check(
        now=now,
        settings=check_settings(),
        group=_group_state(name),
        tx=None if first is None else _pending_check(first, now=now),
    )
    return GroupCheckExplanation(
        producer_group=name,
        pending=pending.count(),
        next_transaction_id=None if first is None else first.transaction_id,
        now=now,
        explanation=explanation,
    )

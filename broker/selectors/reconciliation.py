"""Reads of the reconciliation's stored summaries (``ReconciliationRun`` and its anomalies and
analytics, written by ``broker.services.reconciliation.run``), for the API, the console and the
overview. Every read is bounded by one run (its anomalies and analytics rows are indexed by
run) or by a page of runs; nothing here reads the archive.

"The latest run" is the latest SUCCEEDED one: a run still going or one that failed has no
figures to show, and the previous successful run's stay true for its window.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F, Max, Min, QuerySet, Sum

from broker.conf import conf
from broker.constants import HALF_TOPIC
from broker.errors import NotFound
from broker.models import (
    Message,
    ReconciliationAnalytics,
    ReconciliationAnomaly,
    ReconciliationRun,
    Transaction,
)
from broker.rules.anomalies import ReconcileParams, settle_ms

_STATES = ("committed", "rolled_back", "discarded", "pending")  # analytics columns, by state


def _run_not_found(run_id: int | None) -> NotFound:
    if run_id is None:
        return NotFound("No reconciliation has succeeded yet.", code="reconciliation_run_not_found")
    return NotFound(
        f"Reconciliation run {run_id} does not exist.",
        code="reconciliation_run_not_found",
        details={"id": run_id},
    )


def _runs() -> QuerySet[ReconciliationRun]:
    """Runs with ``duration_ms`` (finished - started, ms; None while running)."""
    return ReconciliationRun.objects.annotate(
        duration_ms=F("finished_timestamp") - F("started_timestamp")
    )


def reconciliation_run_get(run_id: int) -> ReconciliationRun:
    """The run ``run_id``, whatever its state, with ``duration_ms``. Raises NotFound
    ``reconciliation_run_not_found`` (``details.id``)."""
    run = _runs().filter(pk=run_id).first()
    if run is None:
        raise _run_not_found(run_id)
    return run


def reconciliation_run_latest_or_none() -> ReconciliationRun | None:
    """The latest SUCCEEDED run (highest id, with ``duration_ms``), or None before the
    first."""
    return _runs().filter(state=ReconciliationRun.State.SUCCEEDED).order_by("-id").first()


def reconciliation_run_latest() -> ReconciliationRun:
    """The latest SUCCEEDED run. Raises NotFound ``reconciliation_run_not_found`` before the
    first."""
    run = reconciliation_run_latest_or_none()
    if run is None:
        raise _run_not_found(None)
    return run


def reconciliation_run_by_trigger(trigger: str) -> ReconciliationRun | None:
    """The latest run started by ``trigger`` (e.g. ``demo:<run>``), whatever its state, with
    ``duration_ms``; None before it exists."""
    return _runs().filter(trigger=trigger).order_by("-id").first()


@dataclass(frozen=True)
class RunsPage:
    """A page of runs, newest first; ``next_before``: the ``before`` of the next (older) page,
    None on the last."""

    runs: list[ReconciliationRun]
    next_before: int | None


def reconciliation_runs_page(*, before: int | None = None, per_page: int) -> RunsPage:
    """Runs with an id below ``before`` (all when None), newest first, ``per_page`` at most
    (keyset paging on the primary key), with ``duration_ms``."""
    runs = _runs().order_by("-id")
    if before is not None:
        runs = runs.filter(pk__lt=before)
    rows = list(runs[: per_page + 1])
    more = len(rows) > per_page
    rows = rows[:per_page]
    return RunsPage(rows, rows[-1].pk if more and rows else None)


def half_message_first_stored(since_ms: int | None) -> int | None:
    """The store time (ms) of the oldest half message stored at or after ``since_ms`` (of all
    of them when None), or None when there is none: the oldest transaction a run has not yet
    judged. One read of the commit log's ``store_timestamp`` index from ``since_ms`` on."""
    rows = Message.objects.filter(topic=HALF_TOPIC)
    if since_ms is not None:
        rows = rows.filter(store_timestamp__gte=since_ms)
    return rows.order_by("store_timestamp").values_list("store_timestamp", flat=True).first()


def half_messages_stored_range(producer_group: str) -> tuple[int, int] | None:
    """The store times (ms) of the first and the last of the half messages that
    ``producer_group``'s transactions name (``half_commit_log_offset``; a resumed transaction
    names its latest copy), or None when it has none. Indexed reads: the group's transactions,
    then their half messages by primary key."""
    first_halves = Transaction.objects.filter(producer_group=producer_group).values(
        "half_commit_log_offset"
    )
    found = Message.objects.filter(commit_log_offset__in=first_halves).aggregate(
        first=Min("store_timestamp"), last=Max("store_timestamp")
    )
    if found["first"] is None:
        return None
    return found["first"], found["last"]


def reconciliation_anomalies(
    run: ReconciliationRun, *, kind: str | None = None
) -> QuerySet[ReconciliationAnomaly]:
    """The run's stored anomalies (``kind`` only, when given) in the job's order (kind, then
    transaction id), to slice for a page."""
    rows = ReconciliationAnomaly.objects.filter(run=run)
    if kind:
        rows = rows.filter(kind=kind)
    return rows.order_by("id")


def transactions_present(transaction_ids: list[str]) -> set[str]:
    """Which of ``transaction_ids`` still have a row in the database (the rest were pruned
    after archiving, or never had a half message): one indexed query."""
    wanted = [t for t in transaction_ids if t]
    if not wanted:
        return set()
    return set(Transaction.objects.filter(pk__in=wanted).values_list("transaction_id", flat=True))


@dataclass
class LatencySeries:
    """One producer group and topic's resolution latency per hour of the run (ms; None where
    nothing was resolved that hour), aligned with ``RunCharts.hours``."""

    producer_group: str
    topic: str
    p50_ms: list[int | None] = field(default_factory=list)
    p95_ms: list[int | None] = field(default_factory=list)
    p99_ms: list[int | None] = field(default_factory=list)


@dataclass
class RunCharts:
    """A run's analytics as chart series, per hour of half message time (``hours``: each
    hour's start, ms, ascending, the hours that have transactions): final-state counts summed
    over producer groups and topics, the discard rate (discarded / transactions of the hour,
    exact, not an average of rates) and the latency series of each group and topic (latency
    percentiles cannot be summed across groups, so each keeps its own)."""

    hours: list[int]
    committed: list[int]
    rolled_back: list[int]
    discarded: list[int]
    pending: list[int]
    discard_rate: list[float]
    latency: list[LatencySeries]

    def as_json(self) -> dict[str, Any]:
        """The series as JSON-ready values (the run page embeds them for its charts)."""
        return {
            "hours": self.hours,
            "committed": self.committed,
            "rolled_back": self.rolled_back,
            "discarded": self.discarded,
            "pending": self.pending,
            "discard_rate": self.discard_rate,
            "latency": [vars(series) for series in self.latency],
        }


def reconciliation_analytics(run: ReconciliationRun) -> list[ReconciliationAnalytics]:
    """The run's analytics rows, by hour, producer group and topic."""
    return list(
        ReconciliationAnalytics.objects.filter(run=run).order_by(
            "hour_timestamp", "producer_group", "topic"
        )
    )


def reconciliation_charts(rows: list[ReconciliationAnalytics]) -> RunCharts:
    """``RunCharts`` of a run's analytics ``rows`` (``reconciliation_analytics``)."""
    hours = sorted({row.hour_timestamp for row in rows})
    index = {hour: i for i, hour in enumerate(hours)}
    sums = {name: [0] * len(hours) for name in ("transactions", *_STATES)}
    series: dict[tuple[str, str], LatencySeries] = {}
    for row in rows:
        i = index[row.hour_timestamp]
        for name in sums:
            sums[name][i] += getattr(row, name)
        key = (row.producer_group, row.topic)
        if key not in series:
            empty: list[int | None] = [None] * len(hours)
            series[key] = LatencySeries(*key, list(empty), list(empty), list(empty))
        series[key].p50_ms[i] = row.resolution_p50_ms
        series[key].p95_ms[i] = row.resolution_p95_ms
        series[key].p99_ms[i] = row.resolution_p99_ms
    rates = [
        round(d / t, 6) if t else 0.0
        for d, t in zip(sums["discarded"], sums["transactions"], strict=True)
    ]
    return RunCharts(
        hours=hours,
        committed=sums["committed"],
        rolled_back=sums["rolled_back"],
        discarded=sums["discarded"],
        pending=sums["pending"],
        discard_rate=rates,
        latency=[series[key] for key in sorted(series)],
    )


@dataclass(frozen=True)
class GroupAnalytics:
    """A producer group's figures over a whole run (all topics and hours): transactions by
    final state, the discard rate, the worst hourly resolution latency percentiles (ms, the
    largest of its hours' and topics'; None when nothing was resolved) and how long it was
    unreachable (ms, summed over hours; the job repeats the group's hourly figure on each
    topic row, so it is counted once per hour)."""

    producer_group: str
    transactions: int
    committed: int
    rolled_back: int
    discarded: int
    pending: int
    discard_rate: float
    worst_p50_ms: int | None
    worst_p95_ms: int | None
    worst_p99_ms: int | None
    unreachable_ms: int

    @property
    def discard_percent(self) -> float:
        """The discard rate in percent, to two decimals."""
        return round(100 * self.discard_rate, 2)


def producer_group_analytics(run: ReconciliationRun) -> dict[str, GroupAnalytics]:
    """``GroupAnalytics`` of each producer group of ``run``'s analytics (two grouped queries
    over the run's rows)."""
    rows = ReconciliationAnalytics.objects.filter(run=run)
    unreachable: dict[str, int] = defaultdict(int)
    per_hour = rows.values("producer_group", "hour_timestamp").annotate(u=Max("unreachable_ms"))
    for row in per_hour.order_by():
        unreachable[row["producer_group"]] += row["u"] or 0
    totals = (
        rows.values("producer_group")
        .annotate(
            transactions_sum=Sum("transactions"),
            committed_sum=Sum("committed"),
            rolled_back_sum=Sum("rolled_back"),
            discarded_sum=Sum("discarded"),
            pending_sum=Sum("pending"),
            p50=Max("resolution_p50_ms"),
            p95=Max("resolution_p95_ms"),
            p99=Max("resolution_p99_ms"),
        )
        .order_by("producer_group")
    )
    out: dict[str, GroupAnalytics] = {}
    for row in totals:
        group, count = row["producer_group"], row["transactions_sum"] or 0
        out[group] = GroupAnalytics(
            producer_group=group,
            transactions=count,
            committed=row["committed_sum"] or 0,
            rolled_back=row["rolled_back_sum"] or 0,
            discarded=row["discarded_sum"] or 0,
            pending=row["pending_sum"] or 0,
            discard_rate=(row["discarded_sum"] or 0) / count if count else 0.0,
            worst_p50_ms=row["p50"],
            worst_p95_ms=row["p95"],
            worst_p99_ms=row["p99"],
            unreachable_ms=unreachable[group],
        )
    return out


def reconciliation_params(*, since_ms: int, until_ms: int, as_of_ms: int) -> ReconcileParams:
    """The job's parameters for this window, with the broker's settings now
    (``broker.conf``): check max, check interval, transaction timeout, file reserved time,
    visibility SLA and scan interval (all ms but the check max)."""
    return ReconcileParams(
        since_ms=since_ms,
        until_ms=until_ms,
        as_of_ms=as_of_ms,
        transaction_check_max=conf.transaction_check_max,
        transaction_check_interval_ms=conf.transaction_check_interval_ms,
        transaction_timeout_ms=conf.transaction_timeout_ms,
        file_reserved_ms=conf.file_reserved_ms,
        visibility_sla_ms=conf.visibility_sla_ms,
        check_scan_interval_ms=conf.check_scan_interval_ms,
    )


def reconciliation_settle_ms() -> int:
    """How long after its half message a transaction is settled, with the broker's settings now
    (ms; ``broker.rules.anomalies.settle_ms``): the window's ``until`` trails the archive by
    this, and a skipped run says when its oldest transaction settles by it."""
    return settle_ms(reconciliation_params(since_ms=0, until_ms=0, as_of_ms=0))

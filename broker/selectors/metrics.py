"""Reads behind ``/metrics`` (``broker.metrics.BrokerCollector``): the half messages pending
now, and the counters of the two append-only journals as their rollup plus the rows not yet
folded into it (``broker.services.metrics`` folds).

What a scrape reads follows the present, not the history: the gauge reads the PREPARED rows
through the partial indexes on ``state = 'PREPARED'``; a counter reads its few rollup rows and
the journal rows above the rollup's watermark (a primary-key range). The figures are those a
``GROUP BY`` over the whole tables would give (RocketMQ 5.2's RIP-46 names and buckets).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Count

from broker.constants import FINISH_LATENCY_BUCKETS_S
from broker.models import (
    MetricWatermark,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.rules.checks import check_answered
from broker.rules.states import (
    RESOLVED_STATES,
    CheckAnswer,
    DiscardReason,
    ResolutionAction,
    TransactionState,
)

RESOLUTIONS = "resolution"  # MetricRollup.source of the Resolution journal
EVENTS = "event"  # MetricRollup.source of the TransactionEvent journal

# Labels present from the first scrape, at 0, so rates and alerts work before the first event.
OPERATOR_ACTIONS = (
    *(f"{TransactionEvent.Kind.RESOLVED}:{action}" for action in ResolutionAction.values),
    str(TransactionEvent.Kind.RESUMED),
    str(TransactionEvent.Kind.CHECK_REQUESTED),
)
_CHECK_KINDS = (TransactionEvent.Kind.CHECK_SENT, TransactionEvent.Kind.CHECK_UNDELIVERED)


@dataclass
class Totals:
    """What one rollup key adds up to: ``count`` rows; for resolutions also ``sum_ms``, their
    time from half message to end (ms), and ``buckets``, the cumulative counts at or under each
    bound of ``FINISH_LATENCY_BUCKETS_S`` (empty for events); for events ``last_timestamp``,
    the latest row's time (ms; None for resolutions)."""

    count: int = 0
    sum_ms: int = 0
    buckets: list[int] = field(default_factory=list)
    last_timestamp: int | None = None

    def add(self, other: Totals) -> None:
        """Add ``other`` into these totals (bucket by bucket; the later ``last_timestamp``)."""
        self.count += other.count
        self.sum_ms += other.sum_ms
        if other.buckets:
            mine = self.buckets or [0] * len(other.buckets)
            self.buckets = [a + b for a, b in zip(mine, other.buckets, strict=True)]
        if other.last_timestamp is not None:
            self.last_timestamp = max(
                self.last_timestamp or other.last_timestamp, other.last_timestamp
            )


Key = tuple[str, str, str]
"""A rollup key: (kind, label, producer group), see ``broker.models.MetricRollup`` (the group
is "" for resolutions)."""


def resolutions_aggregate(*, after_id: int, up_to_id: int | None = None) -> dict[Key, Totals]:
    """Resolved transactions whose ``Resolution`` id is in ``(after_id, up_to_id]`` (no upper
    bound when None), by (state COMMITTED / ROLLED_BACK, topic), with their latency from
    ``born_timestamp`` to ``resolved_timestamp`` of the ``Transaction`` row. One resolution per
    resolved transaction (the one place that resolves, ``transaction_resolve_locked``, writes
    both in one database transaction), so this counts what ``state IN (COMMITTED,
    ROLLED_BACK)`` would. A primary-key range of the journal joined to those rows only."""
    resolution = connection.ops.quote_name(Resolution._meta.db_table)
    tx = connection.ops.quote_name(Transaction._meta.db_table)
    bounds_ms = [int(b * 1000) for b in FINISH_LATENCY_BUCKETS_S]
    cases = ", ".join(
        "SUM(CASE WHEN t.resolved_timestamp - t.born_timestamp <= %s THEN 1 ELSE 0 END)"
        for _ in bounds_ms
    )
    sql = (
        f"SELECT t.state, t.topic, COUNT(*), SUM(t.resolved_timestamp - t.born_timestamp), {cases} "
        f"FROM {resolution} r JOIN {tx} t ON t.transaction_id = r.transaction_id "
        "WHERE r.id > %s AND t.state IN (%s, %s)"
    )
    params: list[object] = [*bounds_ms, after_id, *RESOLVED_STATES]
    if up_to_id is not None:
        sql += " AND r.id <= %s"
        params.append(up_to_id)
    sql += " GROUP BY t.state, t.topic"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {
            (state, topic, ""): Totals(
                int(n), int(total_ms or 0), [int(c or 0) for c in cumulative]
            )
            for state, topic, n, total_ms, *cumulative in cursor.fetchall()
        }


def events_aggregate(*, after_id: int, up_to_id: int | None = None) -> dict[Key, Totals]:
    """``TransactionEvent`` rows with id in ``(after_id, up_to_id]`` (no upper bound when
    None), counted by (kind, outcome, producer group of the transaction; "" when that row is
    gone) with the latest row's timestamp. A primary-key range of the journal joined to its
    transactions by primary key."""
    event = connection.ops.quote_name(TransactionEvent._meta.db_table)
    tx = connection.ops.quote_name(Transaction._meta.db_table)
    sql = (
        "SELECT e.kind, e.outcome, COALESCE(t.producer_group, ''), COUNT(*), MAX(e.timestamp) "
        f"FROM {event} e LEFT JOIN {tx} t ON t.transaction_id = e.transaction_id "
        "WHERE e.id > %s"
    )
    params: list[object] = [after_id]
    if up_to_id is not None:
        sql += " AND e.id <= %s"
        params.append(up_to_id)
    sql += " GROUP BY e.kind, e.outcome, COALESCE(t.producer_group, '')"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {
            (kind, outcome, group): Totals(int(n), last_timestamp=int(last))
            for kind, outcome, group, n, last in cursor.fetchall()
        }


AGGREGATES = {RESOLUTIONS: resolutions_aggregate, EVENTS: events_aggregate}
"""Per rollup source, its journal's aggregate over an id range (the fold and the reads)."""

READ_ATTEMPTS = 3
"""Lock-free reads of a rollup tried before one under the watermark row's lock."""


def watermark(source: str) -> int:
    """The last journal id of ``source`` folded into the rollup (0 before the first fold)."""
    found = MetricWatermark.objects.filter(source=source).values_list("last_id", flat=True)
    return found.first() or 0


def rollup_totals(source: str) -> dict[Key, Totals]:
    """The totals of ``source`` (``RESOLUTIONS`` or ``EVENTS``) over its whole journal: the
    rollup rows plus the journal rows above the watermark.

    Read without locks: the rollup and its watermark in one statement, the journal above that
    watermark, then the watermark again; if a fold moved it in between (it would count rows
    twice or miss them), read again. The last attempt holds the watermark row's lock (``SELECT
    ... FOR UPDATE``, which every fold takes), so it cannot race."""
    for _ in range(READ_ATTEMPTS):
        last_id, totals = _rollup_read(source)
        tail = AGGREGATES[source](after_id=last_id)
        if watermark(source) == last_id:
            return _merged(totals, tail)
    with transaction.atomic():
        MetricWatermark.objects.select_for_update().filter(source=source).first()
        last_id, totals = _rollup_read(source)
        return _merged(totals, AGGREGATES[source](after_id=last_id))


def _rollup_read(source: str) -> tuple[int, dict[Key, Totals]]:
    """The watermark of ``source`` and its rollup rows, in one statement (one snapshot)."""
    rows = MetricWatermark.objects.filter(source=source).values_list(
        "last_id",
        "rollups__kind",
        "rollups__label",
        "rollups__producer_group",
        "rollups__count",
        "rollups__sum_ms",
        "rollups__buckets",
        "rollups__last_timestamp",
    )
    last_id, totals = 0, {}
    for row in rows:
        last_id, kind, label, group, count, sum_ms, buckets, last = row
        if kind is not None:
            totals[(kind, label, group)] = Totals(count, sum_ms, list(buckets), last)
    return last_id, totals


def _merged(totals: dict[Key, Totals], more: dict[Key, Totals]) -> dict[Key, Totals]:
    for key, extra in more.items():
        totals.setdefault(key, Totals()).add(extra)
    return totals


def half_messages_by_topic() -> dict[str, int]:
    """PREPARED transactions per topic (``rocketmq_half_messages``); topics with none are
    absent. Read through the partial indexes on ``state = 'PREPARED'``, so it costs what is
    pending."""
    rows = (
        Transaction.objects.filter(state=TransactionState.PREPARED)
        .values_list("topic")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return dict(rows)


@dataclass
class ResolutionCounts:
    """Per topic: ``commits``, ``rollbacks`` and the latency ``Totals`` of both together."""

    commits: dict[str, int] = field(default_factory=dict)
    rollbacks: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Totals] = field(default_factory=dict)


def resolution_counts() -> ResolutionCounts:
    """Commits, rollbacks and finish latency per topic (``rocketmq_commit_messages_total``,
    ``rocketmq_rollback_messages_total``, ``rocketmq_finish_message_latency``); topics with
    none are absent."""
    counts = ResolutionCounts()
    for (state, topic, _), totals in sorted(rollup_totals(RESOLUTIONS).items()):
        if not totals.count:
            continue
        by_state = counts.commits if state == TransactionState.COMMITTED else counts.rollbacks
        by_state[topic] = totals.count
        counts.latency.setdefault(topic, Totals()).add(totals)
    return counts


@dataclass
class EventCounts:
    """``checks`` by outcome, ``discards`` by reason, ``operator`` actions by kind
    (``resolved:COMMIT``, ``resolved:ROLLBACK``, ``resumed``); every known label present.
    Per producer group (the groups of ``producer_groups``, each with every known label, and
    any other group the journal names, "" excepted): ``group_checks`` {group: {outcome: n}},
    ``group_discards`` {group: {reason: n}} and ``last_answer`` {group: the time (ms) of its
    latest answered check, ``broker.rules.checks.check_answered``}."""

    checks: dict[str, int]
    discards: dict[str, int]
    operator: dict[str, int]
    group_checks: dict[str, dict[str, int]] = field(default_factory=dict)
    group_discards: dict[str, dict[str, int]] = field(default_factory=dict)
    last_answer: dict[str, int] = field(default_factory=dict)


def event_counts(producer_groups: Iterable[str] = ()) -> EventCounts:
    """The check and operator journal counted by label (``halfmoon_checks_total{outcome}``,
    ``halfmoon_discarded_total{reason}``, ``halfmoon_operator_actions_total{kind}``) and per
    producer group (``halfmoon_producer_group_checks_total{producer_group,outcome}``,
    ``halfmoon_producer_group_discarded_total{producer_group,reason}``, the last answered
    check); ``producer_groups``: groups listed with every label at 0 when they have none."""
    counts = EventCounts(
        checks=dict.fromkeys(CheckAnswer.values, 0),
        discards=dict.fromkeys(DiscardReason.values, 0),
        operator=dict.fromkeys(OPERATOR_ACTIONS, 0),
    )
    for group in producer_groups:
        counts.group_checks[group] = dict.fromkeys(CheckAnswer.values, 0)
        counts.group_discards[group] = dict.fromkeys(DiscardReason.values, 0)
    for (kind, outcome, group), totals in rollup_totals(EVENTS).items():
        if kind == TransactionEvent.Kind.END_REFUSED:
            continue  # a producer's refused end is not an operator action (the timeline shows it)
        per_group: dict[str, dict[str, int]] | None = None
        if kind in _CHECK_KINDS:
            into, label, per_group = counts.checks, outcome, counts.group_checks
        elif kind == TransactionEvent.Kind.DISCARDED:
            into, label, per_group = counts.discards, outcome, counts.group_discards
        else:
            into, label = counts.operator, f"{kind}:{outcome}" if outcome else kind
        into[label] = into.get(label, 0) + totals.count
        if per_group is None or not group:
            continue
        labels = CheckAnswer.values if per_group is counts.group_checks else DiscardReason.values
        row = per_group.setdefault(group, dict.fromkeys(labels, 0))
        row[label] = row.get(label, 0) + totals.count
        answered = kind == TransactionEvent.Kind.CHECK_SENT and check_answered(outcome)
        if answered and totals.last_timestamp is not None:
            counts.last_answer[group] = max(counts.last_answer.get(group, 0), totals.last_timestamp)
    return counts

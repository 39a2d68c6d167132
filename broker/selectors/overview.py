"""Reads behind the console's overview (``/console/`` and ``/console/overview.json``).

More: docs/design.md, "Module notes", broker/selectors/overview.py."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    OuterRef,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber

from broker.conf import conf
from broker.models import Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.rules.states import RESOLVED_STATES, TransactionState
from broker.selectors.reachability import UnreachableGroup, unreachable_groups

BUCKET_MS = 60_000  # one chart point per minute


WINDOW_BUCKETS = 60  # the last hour


PERCENTILES = (0.5, 0.95, 0.99)


_BEFORE = -1  # the bucket of a timestamp before the window


@dataclass(frozen=True)
class OverviewWindow:
    """The overview's window: ``WINDOW_BUCKETS`` whole minutes ending with the current one.

    ``start`` and ``end`` are ms since the epoch (``end`` is the end of the current minute,
    after ``now``); bucket ``i`` is ``[start + i * BUCKET_MS, start + (i + 1) * BUCKET_MS)``."""

    start: int
    end: int
    now: int

    @classmethod
    def ending_at(cls, now: int) -> OverviewWindow:
        """The window whose last bucket holds ``now`` (ms)."""
        end = (now // BUCKET_MS + 1) * BUCKET_MS
        return cls(start=end - WINDOW_BUCKETS * BUCKET_MS, end=end, now=now)

    @property
    def minutes(self) -> list[int]:
        """The start (ms) of each bucket, oldest first."""
        return [self.start + i * BUCKET_MS for i in range(WINDOW_BUCKETS)]

    def bucket(self, field: str) -> Case:
        """SQL: the bucket index of the timestamp column ``field`` (``_BEFORE`` when it is
        before ``start``; NULL when it is NULL)."""
        return Case(
            When(**{f"{field}__lt": self.start}, then=Value(_BEFORE)),
            default=(F(field) - Value(self.start)) / Value(BUCKET_MS),
            output_field=BigIntegerField(),
        )


@dataclass(frozen=True)
class GroupLatency:
    """Resolution latency of one producer group over the window: ``count`` resolutions and the
    p50/p95/p99 of ``resolved - born`` (ms, nearest rank)."""

    producer_group: str
    count: int
    p50_ms: int
    p95_ms: int
    p99_ms: int


@dataclass(frozen=True)
class OldestPending:
    """The oldest PREPARED transaction of a producer group, and the group's pending count."""

    producer_group: str
    pending: int
    transaction_id: str
    topic: str
    born_timestamp: int
    check_times: int
    age_ms: int


@dataclass(frozen=True)
class Overview:
    """Everything the overview shows; times in ms since the epoch, spans in ms.

    The per-minute lists (``pending_over_time``, ``commits``, ``rollbacks``, ``discards``) have
    one entry per bucket of ``minutes``; ``pending_over_time[i]`` is the pending count at the
    end of minute ``i`` (at ``now`` for the current minute). ``check_histogram[k]`` counts the
    pending transactions checked ``k`` times, ``k`` in ``0..check_max`` (more than
    ``check_max`` counts in the last bucket)."""

    now: int
    window_start: int
    window_end: int
    bucket_ms: int
    minutes: list[int]
    pending_now: int
    discarded_now: int
    pending_over_time: list[int]
    commits: list[int]
    rollbacks: list[int]
    discards: list[int]
    check_max: int
    check_histogram: list[int]
    latency: list[GroupLatency]
    unreachable: list[UnreachableGroup]
    oldest_pending: list[OldestPending]

    @property
    def oldest_pending_age_ms(self) -> int | None:
        """Age (ms) of the oldest pending transaction of all groups; None with none pending."""
        return max((row.age_ms for row in self.oldest_pending), default=None)


def _clamp(bucket: int) -> int:
    """A bucket index within the window (a timestamp after ``end``, from a clock ahead of
    this one, counts in the last minute)."""
    return min(bucket, WINDOW_BUCKETS - 1)


def pending_series(window: OverviewWindow) -> tuple[int, list[int]]:
    """The pending count now and at the end of each minute of ``window`` (see the module's
    docstring for why this reads only the PREPARED rows and the rows ended in the window).

    Returns:
        (pending now, [pending at the end of minute i for i in 0..WINDOW_BUCKETS-1]).
    """
    delta = [0] * WINDOW_BUCKETS
    baseline = 0
    pending_now = 0
    pending = (
        Transaction.objects.filter(state=TransactionState.PREPARED)
        .values(born=window.bucket("born_timestamp"))
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in pending:
        pending_now += row["n"]
        if row["born"] == _BEFORE:
            baseline += row["n"]
        else:
            delta[_clamp(row["born"])] += row["n"]
    ended = (
        Transaction.objects.filter(resolved_timestamp__gte=window.start)
        .exclude(state=TransactionState.PREPARED)
        .values(born=window.bucket("born_timestamp"), ended=window.bucket("resolved_timestamp"))
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in ended:
        if row["born"] == _BEFORE:
            baseline += row["n"]
        else:
            delta[_clamp(row["born"])] += row["n"]
        delta[_clamp(row["ended"])] -= row["n"]
    series = []
    running = baseline
    for change in delta:
        running += change
        series.append(running)
    return pending_now, series


def ends_per_minute(window: OverviewWindow) -> dict[str, list[int]]:
    """Commits, rollbacks (transactions ended COMMITTED or ROLLED_BACK in each minute, by
    producer, check answer or operator) and discards (``discarded`` journal entries) per
    minute of ``window``.

    Returns:
        ``{"commits": [...], "rollbacks": [...], "discards": [...]}``, WINDOW_BUCKETS each.
    """
    out = {name: [0] * WINDOW_BUCKETS for name in ("commits", "rollbacks", "discards")}
    ended = (
        Transaction.objects.filter(resolved_timestamp__gte=window.start, state__in=RESOLVED_STATES)
        .values("state", minute=window.bucket("resolved_timestamp"))
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in ended:
        name = "commits" if row["state"] == TransactionState.COMMITTED else "rollbacks"
        out[name][_clamp(row["minute"])] += row["n"]
    discards = (
        TransactionEvent.objects.filter(
            kind=TransactionEvent.Kind.DISCARDED, timestamp__gte=window.start
        )
        .values(minute=window.bucket("timestamp"))
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in discards:
        out["discards"][_clamp(row["minute"])] += row["n"]
    return out


def discards_by_group(since: int) -> dict[str, int]:
    """Discards per producer group since ``since`` (ms): the ``discarded`` journal entries of
    the window (``event_kind_time``), each counted for its transaction's group (a primary-key
    read; an entry whose transaction row is gone is not counted). Groups with none are
    absent."""
    group = Transaction.objects.filter(pk=OuterRef("transaction_id")).values("producer_group")
    rows = (
        TransactionEvent.objects.filter(kind=TransactionEvent.Kind.DISCARDED, timestamp__gte=since)
        .annotate(group=Subquery(group[:1]))
        .exclude(group__isnull=True)
        .values("group")
        .annotate(n=Count("*"))
        .order_by()
    )
    return {row["group"]: row["n"] for row in rows}


def pending_check_times_by_group() -> dict[str, dict[int, int]]:
    """PREPARED transactions per producer group by their ``check_times``:
    ``{group: {check_times: n}}``; groups with none pending are absent. Read through the
    ``(producer_group, state)`` index: it costs what is pending."""
    out: dict[str, dict[int, int]] = {}
    rows = (
        Transaction.objects.filter(state=TransactionState.PREPARED)
        .values("producer_group", "check_times")
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in rows:
        out.setdefault(row["producer_group"], {})[row["check_times"]] = row["n"]
    return out


def check_histogram(check_max: int) -> list[int]:
    """How many PREPARED transactions have been checked ``k`` times, for ``k`` in
    ``0..check_max`` (``HALFMOON_TRANSACTION_CHECK_MAX``); a count above ``check_max`` (the
    setting was lowered) is counted at ``check_max``. The sum of
    ``pending_check_times_by_group`` over the groups."""
    counts = [0] * (check_max + 1)
    for by_times in pending_check_times_by_group().values():
        for times, n in by_times.items():
            counts[min(times, check_max)] += n
    return counts


def resolution_latency(window: OverviewWindow) -> list[GroupLatency]:
    """Resolution latency per producer group over ``window``: p50/p95/p99 (nearest rank,
    ``percentile_disc``) of ``resolved_timestamp - born_timestamp`` (ms) of the transactions
    committed or rolled back in it, by name."""
    table = Transaction._meta.db_table
    percentiles = ", ".join(
        "percentile_disc(%s) WITHIN GROUP (ORDER BY resolved_timestamp - born_timestamp)"
        for _ in PERCENTILES
    )
    sql = (
        f"SELECT producer_group, COUNT(*), {percentiles} FROM {table} "  # noqa: S608 (no input)
        "WHERE resolved_timestamp >= %s AND state IN (%s, %s) "
        "GROUP BY producer_group ORDER BY producer_group"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*PERCENTILES, window.start, *RESOLVED_STATES])
        rows = cursor.fetchall()
    return [GroupLatency(g, n, int(p50), int(p95), int(p99)) for g, n, p50, p95, p99 in rows]


def oldest_pending_per_group(now: int) -> list[OldestPending]:
    """The oldest PREPARED transaction (by ``born_timestamp``, then id) of each producer group
    with any pending, with the group's pending count, oldest first. One query over the pending
    set (window functions)."""
    by_group = [F("producer_group")]
    rows = (
        Transaction.objects.filter(state=TransactionState.PREPARED)
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=by_group,
                order_by=[F("born_timestamp").asc(), F("transaction_id").asc()],
            ),
            pending=Window(Count("*"), partition_by=by_group),
        )
        .filter(rank=1)
        .order_by("born_timestamp", "transaction_id")
        .values(
            "producer_group", "pending", "transaction_id", "topic", "born_timestamp", "check_times"
        )
    )
    return [OldestPending(**row, age_ms=max(0, now - row["born_timestamp"])) for row in rows]


def overview(*, now: int | None = None, check_max: int | None = None) -> Overview:
    """The console's overview at ``now`` (ms; default the clock) over the last hour;
    ``check_max`` defaults to ``HALFMOON_TRANSACTION_CHECK_MAX``. A constant number of
    queries (nine), whatever the number of groups or transactions."""
    now = now_ms() if now is None else now
    check_max = conf.transaction_check_max if check_max is None else check_max
    window = OverviewWindow.ending_at(now)
    pending_now, series = pending_series(window)
    ends = ends_per_minute(window)
    oldest = oldest_pending_per_group(now)
    return Overview(
        now=now,
        window_start=window.start,
        window_end=window.end,
        bucket_ms=BUCKET_MS,
        minutes=window.minutes,
        pending_now=pending_now,
        discarded_now=Transaction.objects.filter(state=TransactionState.DISCARDED).count(),
        pending_over_time=series,
        commits=ends["commits"],
        rollbacks=ends["rollbacks"],
        discards=ends["discards"],
        check_max=check_max,
        check_histogram=check_histogram(check_max),
        latency=resolution_latency(window),
        unreachable=unreachable_groups(now, {row.producer_group: row.pending for row in oldest}),
        oldest_pending=oldest,
    )

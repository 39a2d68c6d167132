"""The reconciliation's analytics: per producer group, topic (the half
message's REAL_TOPIC) and hour of half message time, counts by final state, resolution latency
percentiles, the check-count histogram, the discard rate and how long the producer group was
unreachable for back-checks. Computed by ``broker.pipeline.reconcile`` from its facts, written
to ``analytics/`` and handed back as ``broker.pipeline.result.AnalyticsRow``.

Time unreachable follows the back-check's own rule (``docs/design.md``, "Back-checks"): a
check that could not be delivered (``check_undelivered``) marks the group unreachable until a
check reaches it (``check_sent``: any answer, or a timeout after sending). It is a property of
the producer group, not of a topic: every topic row of a group in an hour carries the same
value.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from broker.pipeline.result import AnalyticsRow
from broker.rules.anomalies import HOUR_MS, ReconcileParams

# percentile_approx's accuracy: a relative error of at most 1/ACCURACY of the rank (and exact
# for groups of fewer than ACCURACY values).
PERCENTILE_ACCURACY = 10_000

ANALYTICS_COLUMNS = (
    "producer_group",
    "topic",
    "hour_ms",
    "transactions",
    "committed",
    "rolled_back",
    "discarded",
    "pending",
    "resolution_p50_ms",
    "resolution_p95_ms",
    "resolution_p99_ms",
    "check_histogram",
    "discard_rate",
    "unreachable_ms",
)


def unreachable_frame(check_events: DataFrame, *, until_ms: int) -> DataFrame:
    """How long each producer group was unreachable per hour (ms, clipped to the hour).

    Args:
        check_events: (producer_group, timestamp, id, kind) with kind ``check_sent`` or
            ``check_undelivered``.
        until_ms: where an interval still open at the end of the logs ends (the run's
            ``as_of``).

    Returns:
        (producer_group, hour_ms, unreachable_ms), only hours with some unreachable time.
    """
    order = Window.partitionBy("producer_group").orderBy("timestamp", "id")
    # The next check that reached the group: a running min in reverse order (a frame ending at
    # the current row is computed incrementally; one reaching to the end would be quadratic).
    reverse = Window.partitionBy("producer_group").orderBy(
        F.col("timestamp").desc(), F.col("id").desc()
    )
    marked = check_events.select(
        "producer_group",
        "timestamp",
        "kind",
        F.lag("kind").over(order).alias("previous"),
        F.min(F.when(F.col("kind") == "check_sent", F.col("timestamp")))
        .over(reverse.rowsBetween(Window.unboundedPreceding, -1))
        .alias("next_reached"),
    )
    intervals = marked.where(
        (F.col("kind") == "check_undelivered")
        & (F.col("previous").isNull() | (F.col("previous") == "check_sent"))
    ).select(
        "producer_group",
        F.col("timestamp").alias("start"),
        F.coalesce("next_reached", F.lit(until_ms)).alias("end"),
    )
    hours = intervals.where(F.col("end") > F.col("start")).select(
        "producer_group",
        "start",
        "end",
        F.explode(
            F.sequence(
                F.col("start") - F.col("start") % HOUR_MS,
                F.col("end") - 1 - (F.col("end") - 1) % HOUR_MS,
                F.lit(HOUR_MS).cast("bigint"),
            )
        ).alias("hour_ms"),
    )
    clipped = F.least(F.col("end"), F.col("hour_ms") + HOUR_MS) - F.greatest(
        F.col("start"), F.col("hour_ms")
    )
    return hours.groupBy("producer_group", "hour_ms").agg(
        F.sum(clipped).cast("bigint").alias("unreachable_ms")
    )


def analytics_frame(
    facts: DataFrame, check_events: DataFrame, params: ReconcileParams
) -> DataFrame:
    """The analytics rows (``ANALYTICS_COLUMNS``) of the judged transactions.

    Args:
        facts: the job's facts (producer_group, topic, half_timestamp, final_state,
            check_times, resolution_latency_ms).
        check_events: see ``unreachable_frame``; of every transaction read, so an unreachable
            stretch is seen whole.
        params: the run's window; open unreachable intervals end at ``as_of_ms``.

    Returns:
        one row per producer group, topic and hour (``hour_ms``, UTC); ``check_histogram`` a
        map from check count (as text) to transactions; percentiles null when nothing in the
        row was resolved (committed or rolled back).
    """
    keys = ["producer_group", "topic", "hour_ms"]
    rows = facts.select(
        F.coalesce("producer_group", F.lit("")).alias("producer_group"),
        F.coalesce("topic", F.lit("")).alias("topic"),
        (F.col("half_timestamp") - F.col("half_timestamp") % HOUR_MS).alias("hour_ms"),
        "final_state",
        "check_times",
        "resolution_latency_ms",
    )

    def count_state(state: str) -> F.Column:
        return F.count(F.when(F.col("final_state") == state, 1))

    main = rows.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("transactions"),
        count_state("COMMITTED").alias("committed"),
        count_state("ROLLED_BACK").alias("rolled_back"),
        count_state("DISCARDED").alias("discarded"),
        count_state("PREPARED").alias("pending"),
        F.percentile_approx("resolution_latency_ms", [0.5, 0.95, 0.99], PERCENTILE_ACCURACY).alias(
            "p"
        ),
    )
    histogram = (
        rows.groupBy(*keys, "check_times")
        .agg(F.count(F.lit(1)).alias("n"))
        .groupBy(*keys)
        .agg(
            F.map_from_entries(
                F.collect_list(F.struct(F.col("check_times").cast("string"), F.col("n")))
            ).alias("check_histogram")
        )
    )
    unreachable = unreachable_frame(check_events, until_ms=params.as_of_ms)
    return (
        main.join(histogram, keys)
        .join(unreachable, ["producer_group", "hour_ms"], "left")
        .select(
            *keys,
            "transactions",
            "committed",
            "rolled_back",
            "discarded",
            "pending",
            F.col("p")[0].cast("bigint").alias("resolution_p50_ms"),
            F.col("p")[1].cast("bigint").alias("resolution_p95_ms"),
            F.col("p")[2].cast("bigint").alias("resolution_p99_ms"),
            "check_histogram",
            (F.col("discarded") / F.col("transactions")).alias("discard_rate"),
            F.coalesce("unreachable_ms", F.lit(0)).cast("bigint").alias("unreachable_ms"),
        )
    )


def analytics_rows(df: DataFrame) -> list[AnalyticsRow]:
    """Collect an analytics frame (small: a row per group, topic and hour) as
    ``AnalyticsRow`` values, ordered by hour, producer group and topic."""
    return [
        AnalyticsRow(
            producer_group=row["producer_group"],
            topic=row["topic"],
            hour_ms=row["hour_ms"],
            transactions=row["transactions"],
            committed=row["committed"],
            rolled_back=row["rolled_back"],
            discarded=row["discarded"],
            pending=row["pending"],
            resolution_p50_ms=row["resolution_p50_ms"],
            resolution_p95_ms=row["resolution_p95_ms"],
            resolution_p99_ms=row["resolution_p99_ms"],
            check_histogram=dict(
                sorted((row["check_histogram"] or {}).items(), key=lambda kv: int(kv[0]))
            ),
            discard_rate=float(row["discard_rate"]),
            unreachable_ms=row["unreachable_ms"],
        )
        for row in df.orderBy("hour_ms", "producer_group", "topic").collect()
    ]

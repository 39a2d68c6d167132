"""The reconciliation's facts: the tall frame of ``logs.logs_read`` aggregated once per msg_id
and written as ``facts/``, one row per transaction.

Takes the tall frame (``tid`` and the struct columns h, op, m, r, e, d). Aggregates it, shuffled
by ``tid``, into one array per source (halves, ops, res, ev, msgs, devs), derives the
``FACT_COLUMNS`` from those arrays, and writes the rows whose half message was stored in
``[since, until)`` (``judged`` true) plus the context rows the later stages need (``judged``
false: msg_ids delivered in the window whose half message is older or missing, and older
transactions with checks). Gives the consumer groups' reach read alongside, for
``anomalies`` (undelivered_to_group).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from broker.pipeline.reconcile.logs import logs_read
from broker.rules.anomalies import ReconcileParams

# Who may send an end that can arrive late (a producer's end or a check's answer); an
# operator's resolve of a DISCARDED transaction is the documented way back.
LATE_END_ACTORS = ("producer", "check")

# The facts/ output: one row per judged transaction (``judged`` true), plus the context rows
# the run needed (``judged`` false): msg_ids delivered in the window whose half message is
# older than the window or missing, and older transactions with checks (for time unreachable).
FACT_COLUMNS = (
    "transaction_id",
    "msg_id",
    "judged",
    "producer_group",
    "topic",
    "queue_id",
    "half_queue_id",
    "half_queue_offset",
    "half_commit_log_offset",
    "half_timestamp",
    "half_messages",
    "check_times",
    "check_timestamps",
    "last_check_timestamp",
    "checks_undelivered",
    "end_action",
    "end_timestamp",
    "resolved_by",
    "resolutions",
    "first_commit_timestamp",
    "first_commit_by",
    "final_state",
    "discard_timestamp",
    "discard_reason",
    "discards",
    "resumes",
    "delivered_commit_log_offsets",
    "delivered_messages",
    "delivered_in_window",
    "visible_timestamp",
    "deliveries",
    "resolution_latency_ms",
    "visibility_latency_ms",
    "first_delivery_latency_ms",
    # Evidence for the rarer anomalies (empty for nearly every transaction).
    "op_doubles",
    "discard_resume_events",
    "refused_ends",
    "check_events",
)

# Parquet writer settings of facts/ (parquet-mr's, per column after '#'). Every transaction id
# and msg_id is distinct: a dictionary for them only fills up and is thrown away (the writer
# falls back to plain encoding) after costing a hash lookup per value; and the per-page size
# statistics (parquet-mr 1.15+: level histograms per page, which Spark's reader does not use)
# are a count per level of every nested column. A few seconds at 10M transactions, inside
# this VM's noise (docs/reconciliation.md, "What it costs").
FACTS_WRITE_OPTIONS = {
    "parquet.enable.dictionary#transaction_id": "false",
    "parquet.enable.dictionary#msg_id": "false",
    "parquet.size.statistics.enabled": "false",
}


def facts_write(
    spark: SparkSession, archive_uri: str, facts_path: str, params: ReconcileParams
) -> DataFrame:
    """Read the logs, write ``facts/`` (``FACT_COLUMNS``). Returns the consumer groups' reach
    (consumer_group, topic, queue_id, max_queue_offset: the highest queue offset each group
    had delivered per queue; small) for undelivered_to_group."""
    tall, group_reach = logs_read(spark, archive_uri, params)
    # Nearly every msg_id is unique on the map side: a partial aggregation there would only
    # copy its rows into buffers. Shuffled by msg_id first, the aggregation runs once, whole.
    by_msg = _derive(_aggregate(tall.repartition("tid"), params), params)
    judged = (
        F.col("half_timestamp").isNotNull()
        & (F.col("half_timestamp") >= params.since_ms)
        & (F.col("half_timestamp") < params.until_ms)
    )
    context = (F.col("delivered_in_window") > 0) | (F.size("check_events") > 0)
    (
        by_msg.withColumn("judged", judged)
        .where(F.col("judged") | context)
        .select(*FACT_COLUMNS)
        .write.mode("overwrite")
        .options(**FACTS_WRITE_OPTIONS)
        .parquet(facts_path)
    )
    return group_reach


def _aggregate(tall: DataFrame, params: ReconcileParams) -> DataFrame:
    """One row per msg_id of the tall frame: each source's rows as an array (``halves``,
    ``ops``, ``res``, ``ev``, ``msgs``, ``devs``). Six collect_list aggregates and nothing else:
    every other per-row aggregate would be evaluated, uselessly, on every row of every source."""
    return tall.groupBy("tid").agg(
        *[
            F.collect_list(column).alias(name)
            for column, name in (
                ("h", "halves"),
                ("op", "ops"),
                ("r", "res"),
                ("e", "ev"),
                ("m", "msgs"),
                ("d", "devs"),
            )
        ]
    )


def _empty(ddl: str) -> Column:
    """An empty array of ``ddl`` elements."""
    return F.array().cast(f"array<{ddl}>")


def _derive(grouped: DataFrame, params: ReconcileParams) -> DataFrame:
    """The columns of ``FACT_COLUMNS`` from the arrays of one msg_id. Nearly every array holds
    zero or one element: those rows take plain, code-generated paths (``get``, ``array_max``,
    ``sort_array``); higher-order functions (interpreted, per element) run only on the rows
    with journal events or with two or more elements."""
    x = F.expr
    ev_size = F.size("ev")
    has_ev = ev_size > 0

    def of_events(expr: str, ddl: str) -> Column:
        return F.coalesce(F.when(has_ev, x(expr)), _empty(ddl))

    mark_ddl = "struct<timestamp: bigint, id: bigint, kind: string, reason: string>"
    events = grouped.select(
        "*",
        F.when(F.size("halves") > 0, F.array_min("halves")["ts"]).alias("half_timestamp"),
        F.array_max("halves").alias("half"),
        F.array_max("res").alias("last_res"),
        F.when(
            F.size("res") == 1,
            F.when(F.get("res", 0)["action"] == "COMMIT", F.get("res", 0)),
        )
        .when(
            F.size("res") > 1,
            x("array_min(filter(res, r -> r.action = 'COMMIT'))"),
        )
        .alias("first_commit"),
        of_events(
            "sort_array(transform(filter(ev, e -> e.kind = 'check_sent'), e -> e.ts))", "bigint"
        ).alias("check_timestamps"),
        F.when(has_ev, x("size(filter(ev, e -> e.kind = 'check_undelivered'))"))
        .otherwise(0)
        .alias("checks_undelivered"),
        of_events(
            "transform(filter(ev, e -> e.kind IN ('check_sent', 'check_undelivered')), "
            "e -> named_struct('timestamp', e.ts, 'id', e.id, 'kind', e.kind))",
            "struct<timestamp: bigint, id: bigint, kind: string>",
        ).alias("check_events"),
        of_events(
            "sort_array(transform(filter(ev, e -> e.kind IN ('discarded', 'resumed')), "
            "e -> named_struct('timestamp', e.ts, 'id', e.id, 'kind', e.kind, "
            "'reason', e.outcome)))",
            mark_ddl,
        ).alias("discard_resume_events"),
        of_events(
            "transform(filter(ev, e -> e.kind = 'end_refused' AND e.actor IN "
            f"({', '.join(repr(a) for a in LATE_END_ACTORS)})), e -> named_struct("
            "'timestamp', e.ts, 'action', e.outcome, 'actor', e.actor, 'accepted', false))",
            "struct<timestamp: bigint, action: string, actor: string, accepted: boolean>",
        ).alias("refused_ends"),
    )
    marks = F.col("discard_resume_events")
    derived = events.select(
        "*",
        F.when(
            F.size(marks) > 0,
            x("array_max(filter(discard_resume_events, m -> m.kind = 'discarded'))"),
        ).alias("last_discard"),
        F.when(
            F.size(marks) > 0,
            x("array_max(filter(discard_resume_events, m -> m.kind = 'resumed'))"),
        ).alias("last_resume"),
    )
    res, discard, resume = F.col("last_res"), F.col("last_discard"), F.col("last_resume")

    def mark(ts: Column, rank: int, event_id: Column, what: Column, present: Column) -> Column:
        return F.when(
            present,
            F.struct(
                ts.alias("ts"),
                F.lit(rank).alias("rank"),
                event_id.cast("bigint").alias("id"),
                what.alias("what"),
            ),
        )

    # The latest of resolution / discard / resume; on one millisecond a resolution wins, then a
    # resume (it can only follow a discard).
    latest = F.greatest(
        mark(res["resolved_timestamp"], 2, F.lit(0), res["action"], res.isNotNull()),
        mark(discard["timestamp"], 0, discard["id"], F.lit("discarded"), discard.isNotNull()),
        mark(resume["timestamp"], 1, resume["id"], F.lit("resumed"), resume.isNotNull()),
    )
    final_state = (
        F.when(latest["what"] == "COMMIT", "COMMITTED")
        .when(latest["what"] == "ROLLBACK", "ROLLED_BACK")
        .when(latest["what"] == "discarded", "DISCARDED")
        .otherwise("PREPARED")
    )
    checks = F.size("check_timestamps")
    # check_times counts the checks after the last resume (in id order, as the rebuild does).
    check_times = F.when(resume.isNull(), checks).otherwise(
        F.size(
            F.filter(
                "check_events", lambda c: (c["kind"] == "check_sent") & (c["id"] > resume["id"])
            )
        )
    )
    msgs_size = F.size("msgs")
    first_msg = F.get("msgs", 0)
    in_window = (first_msg["store_timestamp"] >= params.since_ms) & (
        first_msg["store_timestamp"] < params.until_ms
    )
    visible = F.array_min("msgs")["store_timestamp"]
    first_delivered = F.when(
        F.size("devs") == 1, F.get("devs", 0)["first_delivered_timestamp"]
    ).when(
        F.size("devs") > 1,
        x("array_min(transform(devs, d -> d.first_delivered_timestamp))"),
    )
    half_ts = F.col("half_timestamp")
    return derived.select(
        F.col("tid").alias("transaction_id"),
        F.col("tid").alias("msg_id"),
        F.col("half.pg").alias("producer_group"),
        F.col("half.topic").alias("topic"),
        F.col("half.rqid").alias("queue_id"),
        F.col("half.qid").alias("half_queue_id"),
        F.col("half.qoff").alias("half_queue_offset"),
        F.col("half.clo").alias("half_commit_log_offset"),
        half_ts,
        F.size("halves").alias("half_messages"),
        check_times.cast("int").alias("check_times"),
        "check_timestamps",
        F.array_max("check_timestamps").alias("last_check_timestamp"),
        F.col("checks_undelivered").cast("int").alias("checks_undelivered"),
        res["action"].alias("end_action"),
        res["resolved_timestamp"].alias("end_timestamp"),
        res["resolved_by"].alias("resolved_by"),
        F.when(F.size("res") <= 1, F.col("res"))
        .otherwise(F.sort_array("res"))
        .alias("resolutions"),
        F.col("first_commit.resolved_timestamp").alias("first_commit_timestamp"),
        F.col("first_commit.resolved_by").alias("first_commit_by"),
        final_state.alias("final_state"),
        discard["timestamp"].alias("discard_timestamp"),
        discard["reason"].alias("discard_reason"),
        F.when(F.size(marks) == 0, 0)
        .otherwise(F.size(F.filter(marks, lambda m: m["kind"] == "discarded")))
        .alias("discards"),
        F.when(F.size(marks) == 0, 0)
        .otherwise(F.size(F.filter(marks, lambda m: m["kind"] == "resumed")))
        .alias("resumes"),
        F.when(msgs_size == 0, _empty("bigint"))
        .when(msgs_size == 1, F.array(first_msg["commit_log_offset"]))
        .otherwise(x("transform(sort_array(msgs), m -> m.commit_log_offset)"))
        .alias("delivered_commit_log_offsets"),
        F.when(msgs_size <= 1, F.col("msgs"))
        .otherwise(F.sort_array("msgs"))
        .alias("delivered_messages"),
        F.when(msgs_size == 0, 0)
        .when(msgs_size == 1, F.when(in_window, 1).otherwise(0))
        .otherwise(
            F.size(
                F.filter(
                    "msgs",
                    lambda m: (
                        (m["store_timestamp"] >= params.since_ms)
                        & (m["store_timestamp"] < params.until_ms)
                    ),
                )
            )
        )
        .alias("delivered_in_window"),
        visible.alias("visible_timestamp"),
        F.col("devs").alias("deliveries"),
        F.when(
            final_state.isin("COMMITTED", "ROLLED_BACK"),
            res["resolved_timestamp"] - half_ts,
        ).alias("resolution_latency_ms"),
        (visible - F.col("first_commit.resolved_timestamp")).alias("visibility_latency_ms"),
        (first_delivered - visible).alias("first_delivery_latency_ms"),
        F.col("ops").alias("op_doubles"),
        "discard_resume_events",
        "refused_ends",
        "check_events",
    )

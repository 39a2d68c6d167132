"""The reconciliation job (issue 8): one row per transaction ("facts") from the archived logs,
the anomalies of ``broker.rules.anomalies.AnomalyKind`` with their evidence, the per-bucket
balance of half messages against final states (seed 002's set difference, a Spark left_anti
join) and the analytics (``broker.pipeline.analytics``). The rules are written out in
``docs/reconciliation.md``; ``bench/reconcile_baseline.py`` does the same search in DuckDB.

The plan, chosen so that the logs are shuffled once and the driver holds nothing big:

1. Read the four archive tables from ``since - file_reserved_ms`` up to ``as_of``
   (``archive_io.table_read``): a transaction born in the window may have been resumed from an
   older half message, and a delivery in the window may belong to an older half message.
2. Op messages are exploded into Op entries; only the half keys named twice or more survive
   their aggregation, and they are broadcast onto the half messages. Delivery events are
   summed per (msg_id, consumer group, delivered message) first (a hash aggregation).
3. Half and delivered messages (one pass over the commit log), resolutions, the
   check/discard/resume/refused-end journal and the delivery summaries become one tall frame
   keyed by transaction id (= msg_id), repartitioned by it (nearly every key is unique, so a
   map-side partial aggregation would only copy rows) and aggregated once into one array per
   source. Nearly every array holds zero or one element: the facts come from code-generated
   expressions on those (``get``, ``array_max``, ``sort_array``), and the higher-order
   functions (interpreted, per element) run only on rows with journal events or two or more
   elements. No Python UDF.
4. That frame is written once, as ``facts/``; the anomalies, buckets and analytics are computed
   from the Parquet facts (column-pruned reads), and the driver collects only counts, the first
   ``max_anomalies`` anomalies and the analytics rows (a few per producer group, topic, hour).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_ROLLBACK_TYPE,
    SYSTEM_TOPIC_PREFIX,
)
from broker.pipeline import analytics as analytics_mod
from broker.pipeline.archive_io import table_read
from broker.pipeline.result import Anomaly, ReconcileResult
from broker.pipeline.spark import job_group as spark_job_group
from broker.pipeline.spark import session_conf
from broker.rules.anomalies import BUCKET_MS, AnomalyKind, ReconcileParams, settle_ms

logger = logging.getLogger(__name__)

# The journal kinds the job reads (broker.models.TransactionEvent.Kind; end_refused: an end
# refused because the transaction had already ended, journalled by transaction_end).
EVENT_KINDS = ("check_sent", "check_undelivered", "discarded", "resumed", "end_refused")
# Who may send an end that can arrive late (a producer's end or a check's answer); an
# operator's resolve of a DISCARDED transaction is the documented way back.
LATE_END_ACTORS = ("producer", "check")
# How many transaction ids a bucket_mismatch anomaly lists (all are in the facts output).
BUCKET_IDS_LISTED = 20
# The job's own Spark settings, set for its run and put back after:
# - 16 shuffle partitions (adaptive execution coalesces the small ones; at 10M transactions
#   each of the 16 holds about 2M log rows);
# - adaptive execution may join a shuffled partition through a hash table of its smaller side
#   up to 256 MB instead of sorting both sides (the buckets' set difference: 10M transaction
#   ids against 10M at 10M transactions; Spark's default, 0, always sorts).
JOB_CONF = {
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": "256MB",
}

OUTPUT_PARTS = ("facts", "anomalies", "buckets", "analytics")
STATES = ("PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED")

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

ANOMALY_COLUMNS = ("kind", "transaction_id", "msg_id", "producer_group", "topic", "evidence")


def deliverable_topic(topic: Column) -> Column:
    """A Spark column: ``topic`` is one a consumer can receive from, the negation of
    ``broker.rules.topics.is_system_topic`` (not ``RMQ_SYS_*``, not
    ``TRANS_CHECK_MAX_TIME_TOPIC``, not ``%RETRY%*``/``%DLQ%*``)."""
    return ~(
        topic.startswith(SYSTEM_TOPIC_PREFIX)
        | (topic == F.lit(CHECK_MAX_TIME_TOPIC))
        | topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        | topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
    )


def transactional_delivery(sys_flag: Column, prepared_offset: Column) -> Column:
    """A Spark column: a commit log row is a delivered transactional message: its
    MessageSysFlag transaction bits say TRANSACTION_COMMIT_TYPE (``sys_flag & 0xC == 0x8``) or
    it names its half message (``prepared_transaction_offset``)."""
    bits = sys_flag.bitwiseAND(F.lit(SYS_FLAG_TRANSACTION_ROLLBACK_TYPE))
    return (bits == F.lit(SYS_FLAG_TRANSACTION_COMMIT_TYPE)) | prepared_offset.isNotNull()


def output_path(output_uri: str, part: str) -> str:
    """``{output_uri}/{part}`` (``part``: one of ``OUTPUT_PARTS``)."""
    return f"{output_uri.rstrip('/')}/{part}"


def reconcile(
    spark: SparkSession,
    *,
    archive_uri: str,
    output_uri: str,
    params: ReconcileParams,
    max_anomalies: int,
    job_group: str | None = None,
) -> ReconcileResult:
    """Reconcile the transactions whose half message was stored in
    ``[params.since_ms, params.until_ms)`` against the archive's logs up to ``params.as_of_ms``.

    Args:
        archive_uri: the archive's root (``broker.pipeline.schema`` layout; any scheme Spark
            reads: a path, ``file:``, ``s3a://``, ``hdfs://``).
        output_uri: where the run's Parquet goes: ``facts/``, ``anomalies/``, ``buckets/`` and
            ``analytics/`` under it, each replaced if present.
        params: the window and the broker settings judged by (ms).
        max_anomalies: how many anomalies to hand back in the result (all are in Parquet).
        job_group: a Spark job group to run under, so a status tracker can follow the jobs
            (``broker.pipeline.spark.job_group``).

    Returns:
        a ``ReconcileResult``: transactions judged, counts by final state, anomaly counts by
        kind, the first ``max_anomalies`` anomalies ordered by kind, transaction id, msg id,
        topic and evidence, and the analytics rows.

    Raises:
        ValueError: ``since_ms >= until_ms`` or ``until_ms > as_of_ms``.
        pyspark.errors.PySparkException: Spark failed (unreadable archive, lost executors).
    """
    if params.since_ms >= params.until_ms:
        raise ValueError(f"empty window: since {params.since_ms} >= until {params.until_ms}")
    if params.until_ms > params.as_of_ms:
        raise ValueError(f"until {params.until_ms} is past the archive's as_of {params.as_of_ms}")
    context = (
        spark_job_group(spark, job_group, f"reconcile [{params.since_ms}, {params.until_ms})")
        if job_group
        else nullcontext()
    )
    with session_conf(spark, JOB_CONF), context:
        return _run(spark, archive_uri, output_uri, params, max_anomalies)


def _run(
    spark: SparkSession,
    archive_uri: str,
    output_uri: str,
    params: ReconcileParams,
    max_anomalies: int,
) -> ReconcileResult:
    phase = _PhaseLog()
    facts_path = output_path(output_uri, "facts")
    with phase("facts"):
        group_reach = _facts_write(spark, archive_uri, facts_path, params)
    everything = spark.read.parquet(facts_path)
    facts = everything.where("judged")

    anomalies_path = output_path(output_uri, "anomalies")
    with phase("anomalies"):
        _anomalies(everything, facts, group_reach, params).write.mode("overwrite").parquet(
            anomalies_path
        )
    with phase("buckets"):
        buckets = _buckets(facts, spark.read.parquet(anomalies_path), params)
        buckets_path = output_path(output_uri, "buckets")
        buckets.write.mode("overwrite").parquet(buckets_path)
        mismatches = _bucket_anomalies(spark.read.parquet(buckets_path))
        mismatches.write.mode("append").parquet(anomalies_path)

    analytics_path = output_path(output_uri, "analytics")
    with phase("analytics"):
        analytics_mod.analytics_frame(facts, _check_events(everything), params).write.mode(
            "overwrite"
        ).parquet(analytics_path)
        analytics_rows = analytics_mod.analytics_rows(spark.read.parquet(analytics_path))

    with phase("collect"):
        found = spark.read.parquet(anomalies_path)
        counts = {row["kind"]: row["count"] for row in found.groupBy("kind").count().collect()}
        first = (
            found.orderBy("kind", "transaction_id", "msg_id", "topic", "evidence")
            .limit(max_anomalies)
            .collect()
            if max_anomalies > 0
            else []
        )
    states = dict.fromkeys(STATES, 0)
    for row in analytics_rows:
        states["PREPARED"] += row.pending
        states["COMMITTED"] += row.committed
        states["ROLLED_BACK"] += row.rolled_back
        states["DISCARDED"] += row.discarded
    return ReconcileResult(
        params=params,
        transactions=sum(row.transactions for row in analytics_rows),
        states=states,
        anomaly_counts={kind: counts[kind] for kind in AnomalyKind.values if kind in counts},
        anomalies=[
            Anomaly(
                kind=row["kind"],
                transaction_id=row["transaction_id"],
                msg_id=row["msg_id"],
                producer_group=row["producer_group"],
                topic=row["topic"],
                evidence=json.loads(row["evidence"]),
            )
            for row in first
        ],
        analytics=analytics_rows,
        output_uri=output_uri,
    )


class _PhaseLog:
    """Logs how long each phase of the job took (logger ``broker.pipeline.reconcile``, INFO)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - started
            logger.info("reconcile %s: %.2f s", name, self.seconds[name])


# ---------------------------------------------------------------------------------------------
# The facts: the logs into one row per msg_id


def _facts_write(
    spark: SparkSession, archive_uri: str, facts_path: str, params: ReconcileParams
) -> DataFrame:
    """Read the logs, write ``facts/`` (``FACT_COLUMNS``). Returns the consumer groups' reach
    (consumer_group, topic, queue_id, max_queue_offset: the highest queue offset each group
    had delivered per queue; small) for undelivered_to_group."""
    tall, group_reach = _tall(spark, archive_uri, params)
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


def _tall(
    spark: SparkSession, archive_uri: str, params: ReconcileParams
) -> tuple[DataFrame, DataFrame]:
    """The logs as one tall frame keyed by ``tid`` (msg_id), one of the struct columns h (half
    message), op (its Op entries when doubled), r (resolution), e (journal event), m
    (delivered message) or d (deliveries to one consumer group) set per row; and the consumer
    groups' reach (see ``_facts_write``)."""
    read_from = params.since_ms - params.file_reserved_ms

    def read(table: str) -> DataFrame:
        return table_read(
            spark, uri=archive_uri, table=table, from_ms=read_from, to_ms=params.as_of_ms
        )

    log = read("commit_log")
    # Op entries: Op queue i names offsets of half queue i; only keys named twice matter. A
    # numeric hash aggregation: their count, first and last Op message.
    op_doubles = (
        log.where(F.col("topic") == OP_HALF_TOPIC)
        .select(
            F.col("queue_id").alias("op_qid"),
            F.col("commit_log_offset").alias("op_clo"),
            F.explode("op_offsets").alias("op_qoff"),
        )
        # Nearly every offset is named once: no partial aggregation before the shuffle.
        .repartition("op_qid", "op_qoff")
        .groupBy("op_qid", "op_qoff")
        .agg(
            F.count(F.lit(1)).alias("op_n"),
            F.min("op_clo").alias("op_first"),
            F.max("op_clo").alias("op_last"),
        )
        .where(F.col("op_n") >= 2)
    )
    # Half messages and delivered messages in one pass over the commit log.
    is_half = F.col("topic") == HALF_TOPIC
    is_delivered = deliverable_topic(F.col("topic")) & transactional_delivery(
        F.col("sys_flag"), F.col("prepared_transaction_offset")
    )
    messages = (
        log.where(is_half | is_delivered)
        .join(
            F.broadcast(op_doubles),
            is_half
            & (F.col("queue_id") == F.col("op_qid"))
            & (F.col("queue_offset") == F.col("op_qoff")),
            "left",
        )
        .select(
            F.col("msg_id").alias("tid"),
            # Ordered by store time then offset: max() is the current half message.
            F.when(
                is_half,
                F.struct(
                    F.col("store_timestamp").alias("ts"),
                    F.col("commit_log_offset").alias("clo"),
                    F.col("queue_id").alias("qid"),
                    F.col("queue_offset").alias("qoff"),
                    F.col("producer_group").alias("pg"),
                    F.col("real_topic").alias("topic"),
                    F.col("real_queue_id").alias("rqid"),
                ),
            ).alias("h"),
            F.when(
                F.col("op_n").isNotNull(),
                F.struct(
                    F.col("queue_id").alias("half_queue_id"),
                    F.col("queue_offset").alias("half_queue_offset"),
                    F.col("op_n").cast("int").alias("op_entries"),
                    F.array("op_first", "op_last").alias("op_commit_log_offsets"),
                ),
            ).alias("op"),
            F.when(
                ~is_half,
                F.struct(
                    F.col("store_timestamp"),
                    F.col("commit_log_offset"),
                    F.col("topic"),
                    F.col("queue_id"),
                    F.col("queue_offset"),
                    F.col("producer_group"),
                ),
            ).alias("m"),
        )
    )
    resolutions = read("resolutions").select(
        F.col("transaction_id").alias("tid"),
        F.struct("resolved_timestamp", "action", "resolved_by").alias("r"),
    )
    events = (
        read("transaction_events")
        .where(F.col("kind").isin(*EVENT_KINDS))
        .select(
            F.col("transaction_id").alias("tid"),
            F.struct(
                F.col("timestamp").alias("ts"),
                F.col("id"),
                F.col("kind"),
                F.col("outcome"),
                F.col("actor"),
            ).alias("e"),
        )
    )
    delivery_events = read("delivery_events")
    group_reach = delivery_events.groupBy("consumer_group", "topic", "queue_id").agg(
        F.max("queue_offset").alias("max_queue_offset")
    )

    def first_of(kind: str) -> Column:
        return F.min(F.when(F.col("kind") == kind, F.col("timestamp")))

    deliveries = (
        delivery_events.groupBy("msg_id", "consumer_group", "commit_log_offset")
        .agg(
            first_of("delivered").alias("first_delivered_timestamp"),
            F.count(F.when(F.col("kind") == "delivered", 1)).cast("int").alias("attempts"),
            first_of("acked").alias("acked_timestamp"),
            first_of("dead_lettered").alias("dead_lettered_timestamp"),
        )
        .select(
            F.col("msg_id").alias("tid"),
            F.struct(
                "consumer_group",
                "commit_log_offset",
                "first_delivered_timestamp",
                "attempts",
                "acked_timestamp",
                "dead_lettered_timestamp",
            ).alias("d"),
        )
    )
    tall = (
        messages.unionByName(resolutions, allowMissingColumns=True)
        .unionByName(events, allowMissingColumns=True)
        .unionByName(deliveries, allowMissingColumns=True)
    )
    return tall, group_reach


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


# ---------------------------------------------------------------------------------------------
# Anomalies


def _anomaly(
    kind: AnomalyKind,
    evidence: Column,
    *,
    transaction_id: Column | None = None,
    msg_id: Column | None = None,
    producer_group: Column | None = None,
    topic: Column | None = None,
) -> Column:
    """One anomaly as a struct of ``ANOMALY_COLUMNS`` (``evidence``: a struct, written as
    JSON text); the transaction's own columns unless given."""
    return F.struct(
        F.lit(kind.value).alias("kind"),
        (F.col("transaction_id") if transaction_id is None else transaction_id).alias(
            "transaction_id"
        ),
        (F.col("msg_id") if msg_id is None else msg_id).alias("msg_id"),
        F.coalesce(
            F.col("producer_group") if producer_group is None else producer_group, F.lit("")
        ).alias("producer_group"),
        F.coalesce(F.col("topic") if topic is None else topic, F.lit("")).alias("topic"),
        F.to_json(evidence).alias("evidence"),
    )


def _late_end() -> Column:
    """The first end by a producer or a check (a refused end journalled, or a resolution) whose
    latest discard/resume event before it (for a refused end: at or before it) is a discard;
    null when none. Only evaluated for transactions with a discard."""
    actors = ", ".join(f"'{a}'" for a in LATE_END_ACTORS)
    ends = (
        "concat(refused_ends, transform(filter(resolutions, r -> r.resolved_by IN "
        f"({actors})), r -> named_struct('timestamp', r.resolved_timestamp, "
        "'action', r.action, 'actor', r.resolved_by, 'accepted', true)))"
    )
    # A refused end on the discard's own millisecond came after it (the discard is what
    # refused it); an accepted one on that millisecond won over the discard.
    judged = (
        f"transform({ends}, n -> named_struct('end', n, 'mark', "
        "array_max(filter(discard_resume_events, m -> m.timestamp < n.timestamp OR "
        "(NOT n.accepted AND m.timestamp = n.timestamp)))))"
    )
    late = F.expr(f"array_min(filter({judged}, x -> x.mark.kind = 'discarded'))")
    return F.when(F.col("discards") > 0, late)


def _duplicates() -> Column:
    """The topics on which the transaction has two or more delivered messages, each with those
    messages; only evaluated when it has two or more."""
    per_topic = (
        "transform(array_distinct(transform(delivered_messages, m -> m.topic)), t -> "
        "named_struct('topic', t, 'messages', filter(delivered_messages, m -> m.topic = t)))"
    )
    return F.when(
        F.col("delivered_count_") >= 2,
        F.expr(f"filter({per_topic}, x -> size(x.messages) >= 2)"),
    )


def _transaction_anomalies(facts: DataFrame, params: ReconcileParams) -> DataFrame:
    """hanging, lost_commit, rolled_back_but_delivered, double_resolution,
    duplicate_delivery, late_end and slow_visibility of the judged transactions."""
    scan2 = 2 * params.check_scan_interval_ms
    as_of = F.lit(params.as_of_ms)
    delivered_count = F.size("delivered_commit_log_offsets")
    committed = F.col("first_commit_timestamp").isNotNull()
    delivered = delivered_count > 0
    prepared = F.col("final_state") == "PREPARED"
    past_check_max = (F.col("check_times") >= params.transaction_check_max) & (
        F.col("last_check_timestamp") + params.transaction_check_interval_ms + scan2 <= as_of
    )
    past_reserved = F.col("half_timestamp") + params.file_reserved_ms + scan2 <= as_of
    latency = F.col("visible_timestamp") - F.col("first_commit_timestamp")
    conditions = {
        "hanging": prepared & (past_check_max | past_reserved),
        "lost_commit": committed & ~delivered,
        "rolled_back_but_delivered": delivered
        & ~committed
        & F.col("final_state").isin("ROLLED_BACK", "DISCARDED"),
        "double_resolution": (F.size("resolutions") >= 2) | (F.size("op_doubles") > 0),
        "duplicate": delivered_count >= 2,
        "late": F.col("discards") > 0,
        "slow_visibility": committed & delivered & (latency > params.visibility_sla_ms),
    }
    suspect = F.lit(False)
    for condition in conditions.values():
        suspect = suspect | condition
    # Nearly every transaction is clean: the rest of the work is on the few suspects.
    rows = facts.where(suspect).select(
        "*",
        delivered_count.alias("delivered_count_"),
        *[c.alias(f"is_{name}") for name, c in conditions.items()],
    )
    rows = rows.select("*", _late_end().alias("late"), _duplicates().alias("duplicates"))
    late = F.col("late")
    singles = F.array(
        F.when(
            F.col("is_hanging"),
            _anomaly(
                AnomalyKind.HANGING,
                F.struct(
                    F.when(past_check_max, "check_max").otherwise("file_reserved").alias("reason"),
                    "check_times",
                    "last_check_timestamp",
                    "half_timestamp",
                    as_of.alias("as_of"),
                ),
            ),
        ),
        F.when(
            F.col("is_lost_commit"),
            _anomaly(
                AnomalyKind.LOST_COMMIT,
                F.struct(
                    F.col("first_commit_timestamp").alias("resolved_timestamp"),
                    F.col("first_commit_by").alias("resolved_by"),
                    "topic",
                ),
            ),
        ),
        F.when(
            F.col("is_rolled_back_but_delivered"),
            _anomaly(
                AnomalyKind.ROLLED_BACK_BUT_DELIVERED,
                F.struct(
                    "final_state",
                    "delivered_commit_log_offsets",
                    F.transform("delivered_messages", lambda m: m["topic"]).alias(
                        "delivered_topics"
                    ),
                ),
            ),
        ),
        F.when(
            F.col("is_double_resolution"),
            _anomaly(
                AnomalyKind.DOUBLE_RESOLUTION,
                F.struct(F.col("op_doubles").alias("op_entries"), "resolutions"),
            ),
        ),
        F.when(
            late.isNotNull(),
            _anomaly(
                AnomalyKind.LATE_END,
                F.struct(
                    late["mark"]["timestamp"].alias("discard_timestamp"),
                    late["end"]["timestamp"].alias("end_timestamp"),
                    late["end"]["action"].alias("end_action"),
                    late["end"]["actor"].alias("actor"),
                    late["end"]["accepted"].alias("accepted"),
                ),
            ),
        ),
        F.when(
            F.col("is_slow_visibility"),
            _anomaly(
                AnomalyKind.SLOW_VISIBILITY,
                F.struct(
                    F.col("first_commit_timestamp").alias("resolved_timestamp"),
                    "visible_timestamp",
                    latency.alias("latency_ms"),
                    F.lit(params.visibility_sla_ms).alias("sla_ms"),
                ),
            ),
        ),
    )
    duplicates = F.transform(
        F.coalesce(F.col("duplicates"), F.array()),
        lambda d: _anomaly(
            AnomalyKind.DUPLICATE_DELIVERY,
            F.struct(
                F.transform(d["messages"], lambda m: m["commit_log_offset"]).alias(
                    "commit_log_offsets"
                ),
                F.transform(d["messages"], lambda m: m["queue_id"]).alias("queue_ids"),
                F.transform(d["messages"], lambda m: m["queue_offset"]).alias("queue_offsets"),
            ),
            topic=d["topic"],
        ),
    )
    return rows.select(
        F.explode(F.filter(F.concat(singles, duplicates), lambda a: a.isNotNull()))
    ).select("col.*")


def _anomalies(
    everything: DataFrame, facts: DataFrame, group_reach: DataFrame, params: ReconcileParams
) -> DataFrame:
    """Every anomaly but bucket_mismatch (which needs them all first), ``ANOMALY_COLUMNS``."""
    return (
        _transaction_anomalies(facts, params)
        .unionByName(_orphans(everything, params))
        .unionByName(_undelivered(facts, group_reach))
    )


def _orphans(everything: DataFrame, params: ReconcileParams) -> DataFrame:
    """orphan_delivery: delivered transactional messages stored in ``[since, until)`` whose
    msg_id has no half message (``no_half_message``) or whose half message has no resolution
    and no discard at all (``no_commit``); one anomaly per msg_id."""
    no_half = F.col("half_timestamp").isNull()
    no_end = (F.size("resolutions") == 0) & (F.col("discards") == 0)
    rows = everything.where((F.col("delivered_in_window") > 0) & (no_half | no_end))
    messages = F.col("orphaned")
    in_window = F.filter(
        "delivered_messages",
        lambda m: (
            (m["store_timestamp"] >= params.since_ms) & (m["store_timestamp"] < params.until_ms)
        ),
    )
    return (
        rows.select("*", in_window.alias("orphaned"))
        .select(
            _anomaly(
                AnomalyKind.ORPHAN_DELIVERY,
                F.struct(
                    F.when(no_half, "no_half_message").otherwise("no_commit").alias("reason"),
                    F.transform(messages, lambda m: m["commit_log_offset"]).alias(
                        "commit_log_offsets"
                    ),
                    F.transform(messages, lambda m: m["store_timestamp"]).alias("store_timestamps"),
                    F.transform(messages, lambda m: m["topic"]).alias("topics"),
                ),
                transaction_id=F.when(no_half, F.lit("")).otherwise(F.col("transaction_id")),
                producer_group=F.coalesce("producer_group", F.get(messages, 0)["producer_group"]),
                topic=F.get(messages, 0)["topic"],
            ).alias("a")
        )
        .select("a.*")
    )


def _undelivered(facts: DataFrame, group_reach: DataFrame) -> DataFrame:
    """undelivered_to_group: a delivered message m (topic T, queue q, queue offset o) of a judged
    transaction, and a consumer group G with delivery events on (T, q) past o but none for m's
    commit log offset; one anomaly per (transaction, group), naming its first such message.

    ``group_reach`` (one row per group and queue, small) is broadcast: the facts are not
    shuffled."""
    reach = F.broadcast(group_reach.withColumnRenamed("topic", "reach_topic"))
    messages = facts.where(F.size("delivered_commit_log_offsets") > 0).select(
        "transaction_id",
        "msg_id",
        "producer_group",
        "deliveries",
        F.explode("delivered_messages").alias("m"),
    )
    missed = messages.join(
        reach,
        (F.col("m.topic") == F.col("reach_topic"))
        & (F.col("m.queue_id") == F.col("queue_id"))
        & (F.col("max_queue_offset") > F.col("m.queue_offset")),
    ).where(
        ~F.exists(
            "deliveries",
            lambda d: (
                (d["consumer_group"] == F.col("consumer_group"))
                & (d["commit_log_offset"] == F.col("m.commit_log_offset"))
            ),
        )
    )
    first = missed.groupBy("transaction_id", "msg_id", "producer_group", "consumer_group").agg(
        F.min(F.struct("m", "max_queue_offset")).alias("first")
    )
    return first.select(
        _anomaly(
            AnomalyKind.UNDELIVERED_TO_GROUP,
            F.struct(
                "consumer_group",
                F.col("first.m.topic").alias("topic"),
                F.col("first.m.queue_id").alias("queue_id"),
                F.col("first.m.queue_offset").alias("queue_offset"),
                F.col("first.m.commit_log_offset").alias("commit_log_offset"),
                F.col("first.max_queue_offset").alias("group_max_queue_offset"),
            ),
            topic=F.col("first.m.topic"),
        ).alias("a")
    ).select("a.*")


# ---------------------------------------------------------------------------------------------
# Buckets: seed 002's set difference per producer group and 10-minute bucket


def _buckets(facts: DataFrame, found: DataFrame, params: ReconcileParams) -> DataFrame:
    """Per producer group and 10-minute bucket of half message time (judged transactions):
    ``half_count``, ``final_count``, the halves with no final state (a left_anti join of the
    halves against the finals, seed 002's set difference), ``unexplained_count`` (those no
    other anomaly names: a second left_anti join) with the first ``BUCKET_IDS_LISTED`` of them,
    ``settled`` (min(bucket end, until) + settle_ms <= as_of: the judged part of a bucket the
    window cuts ends at until) and ``flagged`` (settled and something unexplained)."""
    keys = ["producer_group", "bucket_start_ms"]
    halves = facts.select(
        "transaction_id",
        F.coalesce("producer_group", F.lit("")).alias("producer_group"),
        (F.col("half_timestamp") - F.col("half_timestamp") % BUCKET_MS).alias("bucket_start_ms"),
        (F.col("final_state") != "PREPARED").alias("final"),
    )
    finals = halves.where(F.col("final")).select("transaction_id")
    named = found.where(F.col("transaction_id") != "").select("transaction_id")
    unexplained = (
        halves.join(finals, "transaction_id", "left_anti")
        .join(named, "transaction_id", "left_anti")
        .groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("unexplained_count"),
            F.slice(F.sort_array(F.collect_list("transaction_id")), 1, BUCKET_IDS_LISTED).alias(
                "unexplained_transaction_ids"
            ),
        )
    )
    counts = halves.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("half_count"),
        F.count(F.when(F.col("final"), 1)).alias("final_count"),
    )
    end = F.col("bucket_start_ms") + BUCKET_MS
    return (
        counts.join(unexplained, keys, "left")
        .select(
            "producer_group",
            "bucket_start_ms",
            end.alias("bucket_end_ms"),
            "half_count",
            "final_count",
            F.coalesce("unexplained_count", F.lit(0)).alias("unexplained_count"),
            F.coalesce("unexplained_transaction_ids", F.array().cast("array<string>")).alias(
                "unexplained_transaction_ids"
            ),
            # The judged part of a bucket ends at the window's end when that cuts it: its
            # halves are all born before until (the next run balances the rest).
            (F.least(end, F.lit(params.until_ms)) + settle_ms(params) <= params.as_of_ms).alias(
                "settled"
            ),
        )
        .withColumn("flagged", F.col("settled") & (F.col("unexplained_count") > 0))
    )


def _bucket_anomalies(buckets: DataFrame) -> DataFrame:
    """bucket_mismatch: one per flagged bucket, ``transaction_id`` and ``msg_id`` empty."""
    return (
        buckets.where("flagged")
        .select(
            _anomaly(
                AnomalyKind.BUCKET_MISMATCH,
                F.struct(
                    "bucket_start_ms",
                    "bucket_end_ms",
                    "half_count",
                    "final_count",
                    "unexplained_count",
                    "unexplained_transaction_ids",
                ),
                transaction_id=F.lit(""),
                msg_id=F.lit(""),
                producer_group=F.col("producer_group"),
                topic=F.lit(""),
            ).alias("a")
        )
        .select("a.*")
    )


def _check_events(everything: DataFrame) -> DataFrame:
    """The back-check journal's delivered and undelivered checks of every transaction read, with
    the transaction's producer group: (producer_group, timestamp, id, kind)."""
    return (
        everything.where(F.col("producer_group").isNotNull() & (F.size("check_events") > 0))
        .select("producer_group", F.explode("check_events").alias("e"))
        .select("producer_group", "e.timestamp", "e.id", "e.kind")
    )

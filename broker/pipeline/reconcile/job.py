"""The reconciliation job's public entry, ``reconcile``: its stages in order, each written to
Parquet under the run's output URI, then the result collected for the broker.

Takes the archive's URI, the output URI and the window with the broker settings judged by
(``ReconcileParams``). Writes ``facts/`` (``facts.facts_write``), ``anomalies/``
(``anomalies.anomaly_frame`` and ``scheduled.scheduled_anomalies``, then bucket_mismatch
appended), ``buckets/``
(``buckets.bucket_frame``) and ``analytics/`` (``broker.pipeline.analytics``, from the judged
facts and the check journal of every transaction read). Gives a ``ReconcileResult``: counts,
the first anomalies and the analytics rows; nothing big reaches the driver.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from broker.pipeline import analytics as analytics_mod
from broker.pipeline.reconcile.anomalies import anomaly_frame
from broker.pipeline.reconcile.buckets import bucket_anomalies, bucket_frame
from broker.pipeline.reconcile.facts import facts_write
from broker.pipeline.reconcile.scheduled import scheduled_anomalies
from broker.pipeline.result import Anomaly, ReconcileResult
from broker.pipeline.spark import job_group as spark_job_group
from broker.pipeline.spark import session_conf
from broker.rules.anomalies import AnomalyKind, ReconcileParams

# The package's name: the job's public entry is ``broker.pipeline.reconcile.reconcile``.
logger = logging.getLogger("broker.pipeline.reconcile")

# The job's own Spark settings, set for its run and put back after: 16 shuffle partitions
# (adaptive execution coalesces the small ones; at 10M transactions each of the 16 holds about
# 2M log rows).
JOB_CONF = {
    "spark.sql.shuffle.partitions": "16",
}

OUTPUT_PARTS = ("facts", "anomalies", "buckets", "analytics")
STATES = ("PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED")


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
        group_reach = facts_write(spark, archive_uri, facts_path, params)
    everything = spark.read.parquet(facts_path)
    facts = everything.where("judged")

    anomalies_path = output_path(output_uri, "anomalies")
    with phase("anomalies"):
        anomaly_frame(everything, facts, group_reach, params).unionByName(
            scheduled_anomalies(spark, archive_uri, params)
        ).write.mode("overwrite").parquet(anomalies_path)
    with phase("buckets"):
        buckets = bucket_frame(facts, spark.read.parquet(anomalies_path), params)
        buckets_path = output_path(output_uri, "buckets")
        buckets.write.mode("overwrite").parquet(buckets_path)
        mismatches = bucket_anomalies(spark.read.parquet(buckets_path))
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


def _check_events(everything: DataFrame) -> DataFrame:
    """The back-check journal's delivered and undelivered checks of every transaction read, with
    the transaction's producer group: (producer_group, timestamp, id, kind)."""
    return (
        everything.where(F.col("producer_group").isNotNull() & (F.size("check_events") > 0))
        .select("producer_group", F.explode("check_events").alias("e"))
        .select("producer_group", "e.timestamp", "e.id", "e.kind")
    )

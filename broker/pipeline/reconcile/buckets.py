"""The reconciliation's buckets: the set difference of half and ended msgIds per producer group and 10-minute
bucket of half message time, and the bucket_mismatch anomalies of the settled buckets that do
not balance.

Takes the judged facts (transaction_id, producer_group, half_timestamp, final_state) and the
anomalies already found (``ANOMALY_COLUMNS``: a transaction one of them names is explained).
Gives the ``buckets/`` rows (producer_group, bucket_start_ms, bucket_end_ms, half_count,
final_count, unexplained_count, unexplained_transaction_ids, settled, flagged) and, from
those, one bucket_mismatch anomaly per flagged bucket (``ANOMALY_COLUMNS``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from broker.pipeline.reconcile.anomalies import anomaly_struct
from broker.rules.anomalies import BUCKET_MS, AnomalyKind, ReconcileParams, settle_ms

# How many transaction ids a bucket_mismatch anomaly lists (all are in the facts output).
BUCKET_IDS_LISTED = 20


def bucket_frame(facts: DataFrame, found: DataFrame, params: ReconcileParams) -> DataFrame:
    """Per producer group and 10-minute bucket of half message time (judged transactions):
    ``half_count``, ``final_count``, the halves with no final state (the set difference of
    half and ended msgIds: ``facts/`` holds one row per transaction, so it is the judged rows
    whose ``final_state`` is PREPARED, no join), ``unexplained_count`` (those no other anomaly
    names: a left_anti join against the anomalies' transaction ids) with the first
    ``BUCKET_IDS_LISTED`` of them,
    ``settled`` (min(bucket end, until) + settle_ms <= as_of: the judged part of a bucket the
    window cuts ends at until) and ``flagged`` (settled and something unexplained)."""
    keys = ["producer_group", "bucket_start_ms"]
    halves = facts.select(
        "transaction_id",
        F.coalesce("producer_group", F.lit("")).alias("producer_group"),
        (F.col("half_timestamp") - F.col("half_timestamp") % BUCKET_MS).alias("bucket_start_ms"),
        (F.col("final_state") != "PREPARED").alias("final"),
    )
    named = found.where(F.col("transaction_id") != "").select("transaction_id")
    unexplained = (
        halves.where(~F.col("final"))
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


def bucket_anomalies(buckets: DataFrame) -> DataFrame:
    """bucket_mismatch: one per flagged bucket, ``transaction_id`` and ``msg_id`` empty."""
    return (
        buckets.where("flagged")
        .select(
            anomaly_struct(
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

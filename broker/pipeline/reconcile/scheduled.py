"""scheduled_undelivered: the delay and timer messages of the archive's commit log that were
neither delivered on their topic nor recalled by their due time plus the grace
(``broker.rules.anomalies.scheduled_undelivered``), straight from the commit log: they are not
transactions, so they have no row in ``facts/``.

A scheduled message is a ``RMQ_SYS_WHEEL_TIMER`` row without ``timer_del_uniq_key`` (its
``real_topic``, ``delivery_timestamp``); its copy is a row on ``real_topic`` with the same
msg_id and ``delivery_timestamp`` (the timer keeps ``TIMER_DELIVER_MS``); a recall is a
``RMQ_SYS_WHEEL_TIMER`` row whose ``timer_del_uniq_key`` is ``"<real_topic>+<msg_id>"`` with
the same ``delivery_timestamp`` (RocketMQ's delete marker). One anomaly per scheduled message.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from broker.constants import TIMER_TOPIC
from broker.pipeline.archive_io import table_read
from broker.pipeline.reconcile.anomalies import anomaly_struct
from broker.rules.anomalies import AnomalyKind, ReconcileParams, scheduled_grace_ms


def scheduled_anomalies(
    spark: SparkSession, archive_uri: str, params: ReconcileParams
) -> DataFrame:
    """The run's scheduled_undelivered anomalies (``ANOMALY_COLUMNS``): every scheduled message
    due in ``[since_ms, until_ms)``, due plus the grace by ``as_of_ms``, with no copy and no
    delete marker in the commit log read (``[since_ms - file_reserved_ms, as_of_ms)``: a
    message waits at most ``HALFMOON_TIMER_MAX_DELAY_SEC``, within the reserved time)."""
    grace = scheduled_grace_ms(params)
    log = table_read(
        spark,
        uri=archive_uri,
        table="commit_log",
        from_ms=params.since_ms - params.file_reserved_ms,
        to_ms=params.as_of_ms,
    ).where(F.col("delivery_timestamp").isNotNull())
    on_timer = F.col("topic") == TIMER_TOPIC
    due = F.col("delivery_timestamp")
    waiting = log.where(
        on_timer
        & F.col("timer_del_uniq_key").isNull()
        & F.col("real_topic").isNotNull()
        & (due >= params.since_ms)
        & (due < params.until_ms)
        & (due + grace <= params.as_of_ms)
    )
    copies = (
        log.where(~on_timer)
        .select(
            F.col("topic").alias("c_topic"),
            F.col("msg_id").alias("c_msg_id"),
            F.col("delivery_timestamp").alias("c_due"),
        )
        .distinct()
    )
    recalls = (
        log.where(on_timer & F.col("timer_del_uniq_key").isNotNull())
        .select(
            F.col("timer_del_uniq_key").alias("r_key"),
            F.col("delivery_timestamp").alias("r_due"),
        )
        .distinct()
    )
    missing = waiting.join(
        copies,
        (F.col("real_topic") == F.col("c_topic"))
        & (F.col("msg_id") == F.col("c_msg_id"))
        & (due == F.col("c_due")),
        "left_anti",
    ).join(
        recalls,
        (F.concat(F.col("real_topic"), F.lit("+"), F.col("msg_id")) == F.col("r_key"))
        & (due == F.col("r_due")),
        "left_anti",
    )
    return missing.select(
        anomaly_struct(
            AnomalyKind.SCHEDULED_UNDELIVERED,
            F.struct(
                "commit_log_offset",
                F.col("real_queue_id").alias("queue_id"),
                F.col("store_timestamp").alias("scheduled_timestamp"),
                "delivery_timestamp",
                F.lit(grace).alias("grace_ms"),
                F.lit(params.as_of_ms).alias("as_of"),
            ),
            transaction_id=F.lit(""),
            topic=F.col("real_topic"),
        ).alias("a")
    ).select("a.*")

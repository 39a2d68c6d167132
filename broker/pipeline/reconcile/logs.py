"""The reconciliation's first stage: the archive's logs read into one tall frame keyed by
transaction id (= msg_id), and the consumer groups' reach.

More: docs/design.md, "Module notes", broker/pipeline/reconcile/logs.py."""

from __future__ import annotations

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
from broker.pipeline.archive_io import table_read
from broker.rules.anomalies import ReconcileParams

# The journal kinds the job reads (broker.models.TransactionEvent.Kind; end_refused: an end
# refused because the transaction had already ended, journalled by transaction_end).
EVENT_KINDS = ("check_sent", "check_undelivered", "discarded", "resumed", "end_refused")


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


def logs_read(
    spark: SparkSession, archive_uri: str, params: ReconcileParams
) -> tuple[DataFrame, DataFrame]:
    """The logs as one tall frame keyed by ``tid`` (msg_id), one of the struct columns h (half
    message), op (its Op entries when doubled), r (resolution), e (journal event), m
    (delivered message) or d (deliveries to one consumer group) set per row; and the consumer
    groups' reach (the module's docstring)."""
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

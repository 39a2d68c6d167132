"""The reconciliation's anomaly checks: every anomaly but bucket_mismatch (which needs all the
others first, ``buckets``), from the facts.

Takes the rows of ``facts/`` (``FACT_COLUMNS``): all of them for orphan_delivery (the context
rows hold the deliveries whose half message is older or missing), the judged ones for the
others, and the consumer groups' reach (consumer_group, topic, queue_id, max_queue_offset) for
undelivered_to_group. Gives one row per anomaly, ``ANOMALY_COLUMNS``: kind, transaction_id,
msg_id, producer_group, topic (empty strings where none) and evidence (JSON text).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from broker.pipeline.reconcile.facts import LATE_END_ACTORS
from broker.rules.anomalies import AnomalyKind, ReconcileParams

ANOMALY_COLUMNS = ("kind", "transaction_id", "msg_id", "producer_group", "topic", "evidence")


def anomaly_struct(
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


def _row_anomalies(everything: DataFrame, params: ReconcileParams) -> DataFrame:
    """hanging, lost_commit, rolled_back_but_delivered, double_resolution,
    duplicate_delivery, late_end and slow_visibility of the judged transactions, and
    orphan_delivery of every row, in one scan of the facts."""
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
    judged = F.col("judged")
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
    conditions = {name: judged & c for name, c in conditions.items()}
    suspect = _orphaned()
    for condition in conditions.values():
        suspect = suspect | condition
    # Nearly every transaction is clean: the rest of the work is on the few suspects.
    rows = everything.where(suspect).select(
        "*",
        delivered_count.alias("delivered_count_"),
        _orphaned().alias("is_orphan"),
        *[c.alias(f"is_{name}") for name, c in conditions.items()],
    )
    rows = rows.select(
        "*",
        F.when(judged, _late_end()).alias("late"),
        F.when(judged, _duplicates()).alias("duplicates"),
    )
    late = F.col("late")
    singles = F.array(
        F.when(
            F.col("is_hanging"),
            anomaly_struct(
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
            anomaly_struct(
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
            anomaly_struct(
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
            anomaly_struct(
                AnomalyKind.DOUBLE_RESOLUTION,
                F.struct(F.col("op_doubles").alias("op_entries"), "resolutions"),
            ),
        ),
        F.when(
            late.isNotNull(),
            anomaly_struct(
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
            anomaly_struct(
                AnomalyKind.SLOW_VISIBILITY,
                F.struct(
                    F.col("first_commit_timestamp").alias("resolved_timestamp"),
                    "visible_timestamp",
                    latency.alias("latency_ms"),
                    F.lit(params.visibility_sla_ms).alias("sla_ms"),
                ),
            ),
        ),
        F.when(F.col("is_orphan"), _orphan(params)),
    )
    duplicates = F.transform(
        F.coalesce(F.col("duplicates"), F.array()),
        lambda d: anomaly_struct(
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


def anomaly_frame(
    everything: DataFrame, facts: DataFrame, group_reach: DataFrame, params: ReconcileParams
) -> DataFrame:
    """Every anomaly but bucket_mismatch (which needs them all first), ``ANOMALY_COLUMNS``."""
    return _row_anomalies(everything, params).unionByName(_undelivered(facts, group_reach))


def _orphaned() -> Column:
    """A delivered transactional message stored in ``[since, until)`` whose msg_id has no
    half message, or whose half message has no resolution and no discard at all."""
    no_end = (F.size("resolutions") == 0) & (F.col("discards") == 0)
    return (F.col("delivered_in_window") > 0) & (F.col("half_timestamp").isNull() | no_end)


def _orphan(params: ReconcileParams) -> Column:
    """orphan_delivery of an orphaned row (``_orphaned``): ``no_half_message`` or
    ``no_commit``, naming its delivered messages in the window; one anomaly per msg_id."""
    no_half = F.col("half_timestamp").isNull()
    messages = F.filter(
        "delivered_messages",
        lambda m: (
            (m["store_timestamp"] >= params.since_ms) & (m["store_timestamp"] < params.until_ms)
        ),
    )
    return anomaly_struct(
        AnomalyKind.ORPHAN_DELIVERY,
        F.struct(
            F.when(no_half, "no_half_message").otherwise("no_commit").alias("reason"),
            F.transform(messages, lambda m: m["commit_log_offset"]).alias("commit_log_offsets"),
            F.transform(messages, lambda m: m["store_timestamp"]).alias("store_timestamps"),
            F.transform(messages, lambda m: m["topic"]).alias("topics"),
        ),
        transaction_id=F.when(no_half, F.lit("")).otherwise(F.col("transaction_id")),
        producer_group=F.coalesce("producer_group", F.get(messages, 0)["producer_group"]),
        topic=F.get(messages, 0)["topic"],
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
        anomaly_struct(
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

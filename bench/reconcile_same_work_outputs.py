"""The same-work baseline's later outputs (``reconcile_same_work``): ``anomalies/``,
``buckets/`` and ``analytics/`` from the ``facts/`` it wrote, read back as the job reads its own.
Each anomaly kind is one SELECT of the rule in ``docs/reconciliation.md``; the evidence is a
struct written as JSON text (nulls kept: ``reconcile_compare`` reads JSON as values and drops
null members, which Spark's ``to_json`` leaves out).
"""

from __future__ import annotations

from pathlib import Path

from broker.rules.anomalies import BUCKET_MS, HOUR_MS, AnomalyKind, ReconcileParams, settle_ms

# As the job: how many transaction ids a bucket_mismatch lists, and the percentiles.
BUCKET_IDS_LISTED = 20
PERCENTILES = (0.5, 0.95, 0.99)


def _anomaly(
    kind: AnomalyKind,
    evidence: str,
    *,
    tid: str = "transaction_id",
    msg_id: str = "msg_id",
    group: str = "producer_group",
    topic: str = "topic",
) -> str:
    """The ``ANOMALY_COLUMNS`` of one anomaly: ``evidence`` a struct literal's fields."""
    return (
        f"'{kind.value}' AS kind, {tid} AS transaction_id, {msg_id} AS msg_id, "
        f"coalesce({group}, '') AS producer_group, coalesce({topic}, '') AS topic, "
        f"to_json({{{evidence}}})::VARCHAR AS evidence"
    )


def anomalies_sql(p: ReconcileParams, actors: str) -> str:
    """Every anomaly but bucket_mismatch, from the views ``facts`` and ``judged`` and the table
    ``reach`` (``actors``: the late-end actors as an SQL IN list)."""
    in_window = f"m.store_timestamp >= {p.since_ms} AND m.store_timestamp < {p.until_ms}"
    return f"""
    WITH
    ends AS (
        SELECT transaction_id, discard_resume_events,
               unnest(list_concat(refused_ends, list_transform(
                   list_filter(resolutions, lambda r: r.resolved_by IN ({actors})),
                   lambda r: {{'timestamp': r.resolved_timestamp, 'action': r.action,
                          'actor': r.resolved_by, 'accepted': true}}))) AS n
        FROM judged WHERE discards > 0),
    -- Per end, the latest discard or resume before it (a refused end: at or before it).
    marked AS (
        SELECT transaction_id, n, list_max(list_filter(discard_resume_events,
                   lambda m: m.timestamp < n.timestamp OR (NOT n.accepted AND m.timestamp = n.timestamp)))
                   AS mark
        FROM ends),
    late AS (
        SELECT transaction_id, arg_min({{'n': n, 'mark': mark}}, (n.timestamp, n.action, n.actor,
               n.accepted, mark.timestamp, mark.id)) AS x
        FROM marked WHERE mark.kind = 'discarded' GROUP BY 1),
    per_topic AS (
        SELECT *, list_filter(delivered_messages, lambda m: m.topic = t) AS same_topic
        FROM (SELECT transaction_id, msg_id, producer_group, delivered_messages,
                     unnest(list_distinct(list_transform(delivered_messages, lambda m: m.topic))) AS t
              FROM judged WHERE len(delivered_messages) >= 2)),
    messages AS (
        SELECT transaction_id, msg_id, producer_group, deliveries,
               unnest(delivered_messages) AS m
        FROM judged WHERE len(delivered_messages) > 0),
    missed AS (
        SELECT x.*, r.consumer_group, r.max_queue_offset FROM messages x
        JOIN reach r ON r.topic = x.m.topic AND r.queue_id = x.m.queue_id
             AND r.max_queue_offset > x.m.queue_offset
        WHERE len(list_filter(x.deliveries, lambda d: d.consumer_group = r.consumer_group
                                            AND d.commit_log_offset = x.m.commit_log_offset))
              = 0),
    first_missed AS (
        SELECT transaction_id, msg_id, producer_group, consumer_group,
               min({{'m': m, 'max_queue_offset': max_queue_offset}}) AS first
        FROM missed GROUP BY ALL),
    orphans AS (
        SELECT *, half_timestamp IS NULL AS no_half,
               list_filter(delivered_messages, lambda m: {in_window}) AS orphaned
        FROM facts WHERE delivered_in_window > 0
             AND (half_timestamp IS NULL OR (len(resolutions) = 0 AND discards = 0)))
    SELECT * FROM ({") UNION ALL (".join(_kinds(p))})"""


def _kinds(p: ReconcileParams) -> list[str]:
    """One SELECT per anomaly kind but bucket_mismatch, over ``anomalies_sql``'s views."""
    scan2 = 2 * p.check_scan_interval_ms
    past_check_max = (
        f"(check_times >= {p.transaction_check_max} AND last_check_timestamp + "
        f"{p.transaction_check_interval_ms + scan2} <= {p.as_of_ms})"
    )
    past_reserved = f"(half_timestamp + {p.file_reserved_ms + scan2} <= {p.as_of_ms})"
    on_topic = "list_transform(same_topic, lambda m: m.{})"
    orphaned = "list_transform(orphaned, lambda m: m.{})"
    K = AnomalyKind
    kinds: list[tuple[AnomalyKind, str, str, dict[str, str]]] = [
        (
            K.HANGING,
            f"'reason': CASE WHEN {past_check_max} THEN 'check_max' ELSE 'file_reserved' END, "
            "'check_times': check_times, 'last_check_timestamp': last_check_timestamp, "
            f"'half_timestamp': half_timestamp, 'as_of': {p.as_of_ms}",
            f"judged WHERE final_state = 'PREPARED' AND ({past_check_max} OR {past_reserved})",
            {},
        ),
        (
            K.LOST_COMMIT,
            "'resolved_timestamp': first_commit_timestamp, 'resolved_by': first_commit_by, "
            "'topic': topic",
            "judged WHERE first_commit_timestamp IS NOT NULL AND len(delivered_messages) = 0",
            {},
        ),
        (
            K.ROLLED_BACK_BUT_DELIVERED,
            "'final_state': final_state, "
            "'delivered_commit_log_offsets': delivered_commit_log_offsets, "
            "'delivered_topics': list_transform(delivered_messages, lambda m: m.topic)",
            "judged WHERE len(delivered_messages) > 0 AND first_commit_timestamp IS NULL "
            "AND final_state IN ('ROLLED_BACK', 'DISCARDED')",
            {},
        ),
        (
            K.DOUBLE_RESOLUTION,
            "'op_entries': op_doubles, 'resolutions': resolutions",
            "judged WHERE len(resolutions) >= 2 OR len(op_doubles) > 0",
            {},
        ),
        (
            K.LATE_END,
            "'discard_timestamp': x.mark.timestamp, 'end_timestamp': x.n.timestamp, "
            "'end_action': x.n.action, 'actor': x.n.actor, 'accepted': x.n.accepted",
            "judged JOIN late USING (transaction_id)",
            {},
        ),
        (
            K.SLOW_VISIBILITY,
            "'resolved_timestamp': first_commit_timestamp, "
            "'visible_timestamp': visible_timestamp, "
            "'latency_ms': visible_timestamp - first_commit_timestamp, "
            f"'sla_ms': {p.visibility_sla_ms}",
            "judged WHERE first_commit_timestamp IS NOT NULL AND len(delivered_messages) > 0 "
            f"AND visible_timestamp - first_commit_timestamp > {p.visibility_sla_ms}",
            {},
        ),
        (
            K.DUPLICATE_DELIVERY,
            f"'commit_log_offsets': {on_topic.format('commit_log_offset')}, "
            f"'queue_ids': {on_topic.format('queue_id')}, "
            f"'queue_offsets': {on_topic.format('queue_offset')}",
            "per_topic WHERE len(same_topic) >= 2",
            {"topic": "t"},
        ),
        (
            K.ORPHAN_DELIVERY,
            "'reason': CASE WHEN no_half THEN 'no_half_message' ELSE 'no_commit' END, "
            f"'commit_log_offsets': {orphaned.format('commit_log_offset')}, "
            f"'store_timestamps': {orphaned.format('store_timestamp')}, "
            f"'topics': {orphaned.format('topic')}",
            "orphans",
            {
                "tid": "CASE WHEN no_half THEN '' ELSE transaction_id END",
                "group": "coalesce(producer_group, orphaned[1].producer_group)",
                "topic": "orphaned[1].topic",
            },
        ),
        (
            K.UNDELIVERED_TO_GROUP,
            "'consumer_group': consumer_group, 'topic': first.m.topic, "
            "'queue_id': first.m.queue_id, 'queue_offset': first.m.queue_offset, "
            "'commit_log_offset': first.m.commit_log_offset, "
            "'group_max_queue_offset': first.max_queue_offset",
            "first_missed",
            {"topic": "first.m.topic"},
        ),
    ]
    return [
        f"SELECT {_anomaly(kind, evidence, **names)} FROM {source}"
        for kind, evidence, source, names in kinds
    ]


def buckets_sql(p: ReconcileParams) -> str:
    """``buckets/``: per producer group and 10-minute bucket of the judged half messages, the
    ones still PREPARED that no anomaly of the table ``found`` names are unexplained."""
    end = f"bucket_start_ms + {BUCKET_MS}"
    return f"""
    WITH
    halves AS (
        SELECT transaction_id, coalesce(producer_group, '') AS producer_group,
               half_timestamp - half_timestamp % {BUCKET_MS} AS bucket_start_ms,
               final_state <> 'PREPARED' AS final
        FROM judged),
    unexplained AS (
        SELECT producer_group, bucket_start_ms, count(*) AS unexplained_count,
               list(transaction_id ORDER BY transaction_id)[1:{BUCKET_IDS_LISTED}] AS ids
        FROM halves h WHERE NOT final AND NOT EXISTS (
            SELECT 1 FROM found f WHERE f.transaction_id = h.transaction_id)
        GROUP BY ALL),
    counts AS (
        SELECT producer_group, bucket_start_ms, count(*) AS half_count,
               count(*) FILTER (WHERE final) AS final_count
        FROM halves GROUP BY ALL)
    SELECT producer_group, bucket_start_ms, {end} AS bucket_end_ms, half_count, final_count,
           coalesce(unexplained_count, 0) AS unexplained_count,
           coalesce(ids, []::VARCHAR[]) AS unexplained_transaction_ids,
           least({end}, {p.until_ms}) + {settle_ms(p)} <= {p.as_of_ms} AS settled,
           settled AND coalesce(unexplained_count, 0) > 0 AS flagged
    FROM counts LEFT JOIN unexplained USING (producer_group, bucket_start_ms)"""


def bucket_anomalies_sql() -> str:
    """bucket_mismatch: one per flagged bucket of the table ``buckets``."""
    evidence = (
        "'bucket_start_ms': bucket_start_ms, 'bucket_end_ms': bucket_end_ms, "
        "'half_count': half_count, 'final_count': final_count, "
        "'unexplained_count': unexplained_count, "
        "'unexplained_transaction_ids': unexplained_transaction_ids"
    )
    anomaly = _anomaly(AnomalyKind.BUCKET_MISMATCH, evidence, tid="''", msg_id="''", topic="''")
    return f"SELECT {anomaly} FROM buckets WHERE flagged"


def analytics_sql(p: ReconcileParams) -> str:
    """``analytics/``: per producer group, topic and hour of the judged transactions. The
    percentiles are the nearest rank (the value at rank ceil(q * n), 1-based), what Spark's
    ``percentile_approx`` gives exactly below its accuracy."""
    percentiles = ", ".join(
        f"latencies[ceil({q}::DOUBLE * len(latencies))::BIGINT] AS resolution_p{round(q * 100)}_ms"
        for q in PERCENTILES
    )
    return f"""
    WITH
    rows AS (
        SELECT coalesce(producer_group, '') AS producer_group, coalesce(topic, '') AS topic,
               half_timestamp - half_timestamp % {HOUR_MS} AS hour_ms, final_state, check_times,
               resolution_latency_ms
        FROM judged),
    main AS (
        SELECT producer_group, topic, hour_ms, count(*) AS transactions,
               count(*) FILTER (WHERE final_state = 'COMMITTED') AS committed,
               count(*) FILTER (WHERE final_state = 'ROLLED_BACK') AS rolled_back,
               count(*) FILTER (WHERE final_state = 'DISCARDED') AS discarded,
               count(*) FILTER (WHERE final_state = 'PREPARED') AS pending,
               list_sort(list(resolution_latency_ms)
                   FILTER (WHERE resolution_latency_ms IS NOT NULL)) AS latencies
        FROM rows GROUP BY ALL),
    histogram AS (
        SELECT producer_group, topic, hour_ms,
               map_from_entries(list({{'k': check_times::VARCHAR, 'v': n}})) AS check_histogram
        FROM (SELECT producer_group, topic, hour_ms, check_times, count(*) AS n FROM rows
              GROUP BY ALL)
        GROUP BY ALL),
    -- Time unreachable: a check_undelivered after a check_sent (or first) opens an interval
    -- that the group's next check_sent closes (or as_of), clipped to each hour.
    checks AS (
        SELECT producer_group, e.timestamp AS ts, e.id, e.kind
        FROM (SELECT producer_group, unnest(check_events) AS e FROM facts
              WHERE producer_group IS NOT NULL AND len(check_events) > 0)),
    marked AS (
        SELECT producer_group, ts, kind,
               lag(kind) OVER (PARTITION BY producer_group ORDER BY ts, id) AS previous,
               min(CASE WHEN kind = 'check_sent' THEN ts END) OVER (
                   PARTITION BY producer_group ORDER BY ts, id
                   ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS next_reached
        FROM checks),
    intervals AS (
        SELECT producer_group, ts AS start_ms, coalesce(next_reached, {p.as_of_ms}) AS end_ms
        FROM marked
        WHERE kind = 'check_undelivered' AND (previous IS NULL OR previous = 'check_sent')),
    hours AS (
        SELECT producer_group, start_ms, end_ms, unnest(generate_series(
                   start_ms - start_ms % {HOUR_MS}, end_ms - 1 - (end_ms - 1) % {HOUR_MS},
                   {HOUR_MS})) AS hour_ms
        FROM intervals WHERE end_ms > start_ms),
    unreachable AS (
        SELECT producer_group, hour_ms,
               sum(least(end_ms, hour_ms + {HOUR_MS}) - greatest(start_ms, hour_ms))::BIGINT
                   AS unreachable_ms
        FROM hours GROUP BY ALL)
    SELECT producer_group, topic, hour_ms, transactions, committed, rolled_back, discarded,
           pending, {percentiles}, check_histogram, discarded / transactions AS discard_rate,
           coalesce(unreachable_ms, 0)::BIGINT AS unreachable_ms
    FROM main JOIN histogram USING (producer_group, topic, hour_ms)
         LEFT JOIN unreachable USING (producer_group, hour_ms)"""


def outputs_write(con, out: Path, p: ReconcileParams) -> dict[str, int]:
    """Write ``anomalies/``, ``buckets/`` and ``analytics/`` under ``out`` from ``out/facts``
    and the tables ``reach`` and ``scheduled`` (its scheduled_undelivered rows) on ``con``. Returns the anomaly counts by kind (only kinds found)."""
    from reconcile_same_work import LATE_END_ACTORS, parquet_copy, sql_list

    con.execute(f"CREATE TEMP VIEW facts AS SELECT * FROM read_parquet('{out}/facts/*.parquet')")
    con.execute("CREATE TEMP VIEW judged AS SELECT * FROM facts WHERE judged")
    con.execute(
        f"CREATE TEMP TABLE found AS {anomalies_sql(p, sql_list(LATE_END_ACTORS))} "
        "UNION ALL SELECT * FROM scheduled"
    )
    con.execute(f"CREATE TEMP TABLE buckets AS {buckets_sql(p)}")
    parquet_copy(con, "SELECT * FROM buckets", out / "buckets")
    parquet_copy(con, f"SELECT * FROM found UNION ALL {bucket_anomalies_sql()}", out / "anomalies")
    parquet_copy(con, analytics_sql(p), out / "analytics")
    counts = dict(
        con.execute(
            f"SELECT kind, count(*) FROM read_parquet('{out}/anomalies/*.parquet') GROUP BY 1"
        ).fetchall()
    )
    return {kind: counts[kind] for kind in AnomalyKind.values if counts.get(kind)}

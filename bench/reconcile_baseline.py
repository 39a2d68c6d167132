"""The reconciliation's anomaly search done in one process with DuckDB, over the same Parquet
archive the Spark job reads: ``bench/reconcile.py``'s search-only baseline, its second figure
(no output written; ``bench/reconcile_same_work.py`` does the job's whole work). Same
definitions (``docs/reconciliation.md``), written independently as plain relational SQL (the
job uses per-transaction arrays), so the two cross-check each other: the bench fails when their
counts differ.

    from reconcile_baseline import baseline
    counts = baseline("var/bench/reconcile/archive-1000000", params)   # {"hanging": 4, ...}
"""

from __future__ import annotations

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPIC_PREFIX,
)
from broker.pipeline.schema import TIME_COLUMNS, table_path
from broker.rules.anomalies import BUCKET_MS, AnomalyKind, ReconcileParams, settle_ms

# Written out here, not imported from the job, so a wrong constant there shows as a
# disagreement: the journal kinds read, and who sends an end that can arrive late.
EVENT_KINDS = ("check_sent", "check_undelivered", "discarded", "resumed", "end_refused")
LATE_END_ACTORS = ("producer", "check")


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def baseline(
    archive_uri: str,
    params: ReconcileParams,
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
) -> dict[str, int]:
    """The anomaly counts by kind (only kinds found) for ``params`` over the archive at
    ``archive_uri`` (a local path). ``threads``: DuckDB's threads (default: all cores);
    ``memory_limit``: DuckDB's (``"4GB"``; default 80% of the machine's memory)."""
    import duckdb

    p = params
    lo = p.since_ms - p.file_reserved_ms
    scan2 = 2 * p.check_scan_interval_ms
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {threads}")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")

    def source(table: str) -> str:
        column = TIME_COLUMNS[table]
        return (
            f"(SELECT * FROM read_parquet('{table_path(archive_uri, table)}/*/*/*/*.parquet', "
            f"hive_partitioning = true) WHERE segment >= {lo - 3_600_000} "
            f"AND segment < {p.as_of_ms} AND {column} >= {lo} AND {column} < {p.as_of_ms})"
        )

    deliverable = (
        f"NOT (topic LIKE '{SYSTEM_TOPIC_PREFIX}%' OR topic = '{CHECK_MAX_TIME_TOPIC}' "
        f"OR starts_with(topic, '{RETRY_GROUP_TOPIC_PREFIX}') "
        f"OR starts_with(topic, '{DLQ_GROUP_TOPIC_PREFIX}'))"
    )
    sql = f"""
    WITH
    log AS (SELECT commit_log_offset, topic, queue_id, queue_offset, msg_id, producer_group,
                   sys_flag, store_timestamp, prepared_transaction_offset, real_topic, op_offsets
            FROM {source("commit_log")}),
    halves AS (SELECT * FROM log WHERE topic = '{HALF_TOPIC}'),
    delivered AS (SELECT * FROM log WHERE {deliverable}
                  AND ((sys_flag & 12) = 8 OR prepared_transaction_offset IS NOT NULL)),
    res AS (SELECT * FROM {source("resolutions")}),
    ev AS (SELECT * FROM {source("transaction_events")} WHERE kind IN ({_sql_list(EVENT_KINDS)})),
    dev AS (SELECT * FROM {source("delivery_events")}),
    tx AS (SELECT msg_id AS tid, min(store_timestamp) AS half_ts,
                  arg_max(producer_group, (store_timestamp, commit_log_offset)) AS pg,
                  arg_max(real_topic, (store_timestamp, commit_log_offset)) AS topic
           FROM halves GROUP BY msg_id),
    judged AS (SELECT * FROM tx WHERE half_ts >= {p.since_ms} AND half_ts < {p.until_ms}),
    marks AS (SELECT transaction_id AS tid, timestamp AS ts, CASE kind WHEN 'resumed' THEN 1 ELSE 0 END AS rank,
                     id, kind AS what FROM ev WHERE kind IN ('discarded', 'resumed')
              UNION ALL
              SELECT transaction_id, resolved_timestamp, 2, 0, action FROM res),
    latest AS (SELECT tid, arg_max(what, (ts, rank, id, what)) AS what FROM marks GROUP BY tid),
    last_resume AS (SELECT transaction_id AS tid, max(id) AS id FROM ev WHERE kind = 'resumed'
                    GROUP BY 1),
    checks AS (SELECT e.transaction_id AS tid,
                      count(*) FILTER (WHERE r.id IS NULL OR e.id > r.id) AS check_times,
                      max(e.timestamp) AS last_check
               FROM ev e LEFT JOIN last_resume r ON r.tid = e.transaction_id
               WHERE e.kind = 'check_sent' GROUP BY 1),
    facts AS (SELECT j.*, CASE l.what WHEN 'COMMIT' THEN 'COMMITTED' WHEN 'ROLLBACK' THEN 'ROLLED_BACK'
                                      WHEN 'discarded' THEN 'DISCARDED' ELSE 'PREPARED' END AS state,
                     coalesce(c.check_times, 0) AS check_times, c.last_check
              FROM judged j LEFT JOIN latest l USING (tid) LEFT JOIN checks c USING (tid)),
    first_commit AS (SELECT transaction_id AS tid, min(resolved_timestamp) AS ts FROM res
                     WHERE action = 'COMMIT' GROUP BY 1),
    first_delivery AS (SELECT msg_id AS tid, arg_min(store_timestamp, (store_timestamp, commit_log_offset)) AS ts
                       FROM delivered GROUP BY 1),
    hanging AS (SELECT tid FROM facts WHERE state = 'PREPARED' AND (
                   (check_times >= {p.transaction_check_max}
                    AND last_check + {p.transaction_check_interval_ms + scan2} <= {p.as_of_ms})
                   OR half_ts + {p.file_reserved_ms + scan2} <= {p.as_of_ms})),
    lost_commit AS (SELECT tid FROM facts JOIN first_commit USING (tid)
                    WHERE tid NOT IN (SELECT msg_id FROM delivered)),
    rolled_back_but_delivered AS (
        SELECT tid FROM facts WHERE state IN ('ROLLED_BACK', 'DISCARDED')
        AND tid IN (SELECT msg_id FROM delivered) AND tid NOT IN (SELECT tid FROM first_commit)),
    orphan_delivery AS (
        SELECT DISTINCT d.msg_id AS tid, tx.tid IS NULL AS no_half FROM delivered d
        LEFT JOIN tx ON tx.tid = d.msg_id
        WHERE d.store_timestamp >= {p.since_ms} AND d.store_timestamp < {p.until_ms}
          AND (tx.tid IS NULL OR (d.msg_id NOT IN (SELECT transaction_id FROM res)
               AND d.msg_id NOT IN (SELECT transaction_id FROM ev WHERE kind = 'discarded')))),
    op_entries AS (SELECT queue_id, unnest(op_offsets) AS half_offset FROM log
                   WHERE topic = '{OP_HALF_TOPIC}'),
    op_doubles AS (SELECT queue_id, half_offset FROM op_entries GROUP BY ALL HAVING count(*) >= 2),
    double_resolution AS (
        SELECT tid FROM facts WHERE tid IN (
            SELECT transaction_id FROM res GROUP BY 1 HAVING count(*) >= 2
            UNION SELECT h.msg_id FROM halves h JOIN op_doubles o
                  ON o.queue_id = h.queue_id AND o.half_offset = h.queue_offset)),
    duplicate_delivery AS (SELECT f.tid, d.topic FROM facts f JOIN delivered d ON d.msg_id = f.tid
                           GROUP BY ALL HAVING count(*) >= 2),
    ends AS (SELECT transaction_id AS tid, timestamp AS ts, true AS refused FROM ev
             WHERE kind = 'end_refused' AND actor IN ({_sql_list(LATE_END_ACTORS)})
             UNION ALL
             SELECT transaction_id, resolved_timestamp, false FROM res
             WHERE resolved_by IN ({_sql_list(LATE_END_ACTORS)})),
    end_marks AS (SELECT n.tid, n.ts, arg_max(m.what, (m.ts, m.id)) AS what
                  FROM ends n JOIN marks m ON m.tid = n.tid AND m.rank < 2
                       AND (m.ts < n.ts OR (n.refused AND m.ts = n.ts))
                  GROUP BY n.tid, n.ts, n.refused),
    late_end AS (SELECT DISTINCT tid FROM end_marks WHERE what = 'discarded'
                 AND tid IN (SELECT tid FROM facts)),
    reach AS (SELECT consumer_group, topic, queue_id, max(queue_offset) AS max_offset FROM dev
              GROUP BY ALL),
    undelivered_to_group AS (
        SELECT DISTINCT f.tid, r.consumer_group FROM facts f
        JOIN delivered d ON d.msg_id = f.tid
        JOIN reach r ON r.topic = d.topic AND r.queue_id = d.queue_id AND r.max_offset > d.queue_offset
        WHERE NOT EXISTS (SELECT 1 FROM dev x WHERE x.consumer_group = r.consumer_group
                          AND x.commit_log_offset = d.commit_log_offset)),
    slow_visibility AS (SELECT tid FROM facts JOIN first_commit c USING (tid)
                        JOIN first_delivery v USING (tid)
                        WHERE v.ts - c.ts > {p.visibility_sla_ms}),
    named AS (SELECT tid FROM hanging UNION SELECT tid FROM lost_commit
              UNION SELECT tid FROM rolled_back_but_delivered
              UNION SELECT tid FROM orphan_delivery WHERE NOT no_half
              UNION SELECT tid FROM double_resolution UNION SELECT tid FROM duplicate_delivery
              UNION SELECT tid FROM late_end UNION SELECT tid FROM undelivered_to_group
              UNION SELECT tid FROM slow_visibility),
    bucket_mismatch AS (
        SELECT coalesce(pg, '') AS pg, half_ts - half_ts % {BUCKET_MS} AS bucket FROM facts
        WHERE state = 'PREPARED' AND tid NOT IN (SELECT tid FROM named)
          AND least(half_ts - half_ts % {BUCKET_MS} + {BUCKET_MS}, {p.until_ms})
              + {settle_ms(p)} <= {p.as_of_ms}
        GROUP BY ALL)
    SELECT 'hanging', count(*) FROM hanging
    UNION ALL SELECT 'lost_commit', count(*) FROM lost_commit
    UNION ALL SELECT 'rolled_back_but_delivered', count(*) FROM rolled_back_but_delivered
    UNION ALL SELECT 'orphan_delivery', count(*) FROM orphan_delivery
    UNION ALL SELECT 'double_resolution', count(*) FROM double_resolution
    UNION ALL SELECT 'duplicate_delivery', count(*) FROM duplicate_delivery
    UNION ALL SELECT 'late_end', count(*) FROM late_end
    UNION ALL SELECT 'undelivered_to_group', count(*) FROM undelivered_to_group
    UNION ALL SELECT 'slow_visibility', count(*) FROM slow_visibility
    UNION ALL SELECT 'bucket_mismatch', count(*) FROM bucket_mismatch
    """
    counts = dict(con.execute(sql).fetchall())
    con.close()
    return {kind: counts[kind] for kind in AnomalyKind.values if counts.get(kind)}

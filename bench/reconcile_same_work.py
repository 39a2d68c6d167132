"""The reconciliation's whole work done in one process with DuckDB, over the same archive the
Spark job reads: ``bench/reconcile.py``'s same-work baseline. It writes what the job writes
(``facts/``, ``anomalies/``, ``buckets/``, ``analytics/``, Parquet, the same schemas and rows),
so the bench times two programs doing the same job, and ``reconcile_compare`` checks their
outputs agree. The rules are those of ``docs/reconciliation.md`` (the table "Where each rule
lives" names each one's place here and in the job), written as relational SQL: one aggregate
per log and transaction id, joined, instead of the job's one grouping of a tall frame.

    from reconcile_same_work import same_work
    counts = same_work("var/bench/reconcile/archive-1000000", "out-duckdb", params)

This module reads the logs and writes ``facts/``; ``reconcile_same_work_outputs`` the rest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from reconcile_same_work_outputs import outputs_write

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_ROLLBACK_TYPE,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from broker.pipeline.schema import ADDED_COLUMNS, ARCHIVE_TABLES, TIME_COLUMNS, table_path
from broker.rules.anomalies import AnomalyKind, ReconcileParams, scheduled_grace_ms

# Written out here, not imported from the job, so a wrong constant there shows as a
# difference: the journal kinds read, and who sends an end that can arrive late.
EVENT_KINDS = ("check_sent", "check_undelivered", "discarded", "resumed", "end_refused")
LATE_END_ACTORS = ("producer", "check")
OUTPUT_PARTS = ("facts", "anomalies", "buckets", "analytics")

_DUCK_TYPES = {
    "bigint": "BIGINT",
    "int": "INTEGER",
    "string": "VARCHAR",
    "array<bigint>": "BIGINT[]",
}


def sql_list(values: tuple[str, ...]) -> str:
    """``('a', 'b')`` -> ``"'a', 'b'"`` (an SQL IN list)."""
    return ", ".join(f"'{v}'" for v in values)


def parquet_copy(con, sql: str, directory: Path) -> None:
    """Write the rows of ``sql`` as ``directory/part-00000.parquet`` (snappy), replacing
    ``directory``."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    con.execute(
        f"COPY ({sql}) TO '{directory / 'part-00000.parquet'}' (FORMAT parquet, COMPRESSION snappy)"
    )


def _source(archive_uri: str, table: str, lo: int, hi: int) -> str:
    """The rows of ``table`` whose time column is in ``[lo, hi)``: segments pruned by their
    directory (a segment holds an hour at most), then rows filtered, as the job reads them. A
    table with no file reads as empty."""
    columns = ARCHIVE_TABLES[table]
    root = Path(table_path(archive_uri, table))
    if not any(root.glob("*/*/*/*.parquet")):
        nulls = ", ".join(f"NULL::{_DUCK_TYPES[kind]} AS {name}" for name, kind in columns)
        return f"(SELECT {nulls} WHERE false)"
    column = TIME_COLUMNS[table]
    files = f"{root}/*/*/*/*.parquet"
    missing = _missing_somewhere(files, ADDED_COLUMNS.get(table, ()))
    # A file written before a column was added lacks it: read by name, null there (as Spark).
    names = ", ".join(
        f"NULL::{_DUCK_TYPES[kind]} AS {name}" if missing.get(name) == "everywhere" else name
        for name, kind in columns
    )
    union = ", union_by_name = true" if missing else ""
    return (
        f"(SELECT {names} FROM read_parquet('{files}', hive_partitioning = true{union}) "
        f"WHERE segment >= {lo - 3_600_000} AND segment < {hi} "
        f"AND {column} >= {lo} AND {column} < {hi})"
    )


def _missing_somewhere(files: str, added: tuple[str, ...]) -> dict[str, str]:
    """Of the ``added`` columns, those some of the Parquet ``files`` (a glob) lack:
    ``"everywhere"`` when every file does, else ``"somewhere"``."""
    if not added:
        return {}
    import duckdb

    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT name, count(DISTINCT file_name) FROM parquet_schema('{files}') GROUP BY name"
        ).fetchall()
        files_n = con.execute(f"SELECT count(*) FROM glob('{files}')").fetchone()[0]
    finally:
        con.close()
    holding = dict(rows)
    out = {}
    for name in added:
        n = holding.get(name, 0)
        if n < files_n:
            out[name] = "everywhere" if n == 0 else "somewhere"
    return out


def facts_sql(archive_uri: str, p: ReconcileParams) -> str:
    """The ``facts/`` rows: per transaction id, one aggregate of each log (half messages with
    their doubled Op entries, resolutions, journal events, delivered messages, deliveries),
    joined on the id, the judged transactions and the context rows kept."""
    lo, hi = p.since_ms - p.file_reserved_ms, p.as_of_ms
    log, res, ev, dev = (
        _source(archive_uri, t, lo, hi)
        for t in ("commit_log", "resolutions", "transaction_events", "delivery_events")
    )
    deliverable = (
        f"NOT (starts_with(topic, '{SYSTEM_TOPIC_PREFIX}') OR topic = '{CHECK_MAX_TIME_TOPIC}' "
        f"OR starts_with(topic, '{RETRY_GROUP_TOPIC_PREFIX}') "
        f"OR starts_with(topic, '{DLQ_GROUP_TOPIC_PREFIX}'))"
    )
    window = f"BETWEEN {p.since_ms} AND {p.until_ms - 1}"
    mark = "{'timestamp': timestamp, 'id': id, 'kind': kind, 'reason': outcome}"
    return f"""
    WITH
    log AS (SELECT * FROM {log}),
    op_doubles AS (
        SELECT queue_id, half_offset, count(*)::INTEGER AS n, min(commit_log_offset) AS first,
               max(commit_log_offset) AS last
        FROM (SELECT queue_id, commit_log_offset, unnest(op_offsets) AS half_offset FROM log
              WHERE topic = '{OP_HALF_TOPIC}')
        GROUP BY ALL HAVING count(*) >= 2),
    h AS (
        SELECT l.msg_id AS tid, min(l.store_timestamp) AS half_timestamp,
               count(*)::INTEGER AS half_messages,
               -- The current half message: the latest by store time, then commit log offset
               -- (one number, so the comparison stays numeric).
               arg_max({{'pg': l.producer_group, 'topic': l.real_topic, 'rqid': l.real_queue_id,
                        'qid': l.queue_id, 'qoff': l.queue_offset, 'clo': l.commit_log_offset}},
                       l.store_timestamp::HUGEINT * {2**64} + l.commit_log_offset) AS half,
               list({{'half_queue_id': l.queue_id, 'half_queue_offset': l.queue_offset,
                     'op_entries': o.n, 'op_commit_log_offsets': [o.first, o.last]}})
                   FILTER (WHERE o.n IS NOT NULL) AS op_doubles
        FROM log l LEFT JOIN op_doubles o
             ON o.queue_id = l.queue_id AND o.half_offset = l.queue_offset
        WHERE l.topic = '{HALF_TOPIC}' GROUP BY 1),
    r_list AS (
        SELECT transaction_id AS tid,
               list_sort(list({{'resolved_timestamp': resolved_timestamp, 'action': action,
                               'resolved_by': resolved_by}})) AS resolutions
        FROM {res} GROUP BY 1),
    -- The latest resolution (by time, action, resolver) and the first COMMIT.
    r AS (
        SELECT tid, resolutions, resolutions[-1] AS last,
               list_filter(resolutions, lambda x: x.action = 'COMMIT')[1] AS first_commit
        FROM r_list),
    e AS (
        SELECT transaction_id AS tid,
               list_sort(list(timestamp) FILTER (WHERE kind = 'check_sent'))
                   AS check_timestamps,
               count(*) FILTER (WHERE kind = 'check_undelivered')::INTEGER AS checks_undelivered,
               list({{'timestamp': timestamp, 'id': id, 'kind': kind}})
                   FILTER (WHERE kind IN ('check_sent', 'check_undelivered')) AS check_events,
               list_sort(list({mark}) FILTER (WHERE kind IN ('discarded', 'resumed')))
                   AS discard_resume_events,
               arg_max({mark}, (timestamp, id)) FILTER (WHERE kind = 'discarded') AS discard,
               arg_max({mark}, (timestamp, id)) FILTER (WHERE kind = 'resumed') AS resume,
               count(*) FILTER (WHERE kind = 'discarded')::INTEGER AS discards,
               count(*) FILTER (WHERE kind = 'resumed')::INTEGER AS resumes,
               list({{'timestamp': timestamp, 'action': outcome, 'actor': actor,
                     'accepted': false}})
                   FILTER (WHERE kind = 'end_refused' AND actor IN ({sql_list(LATE_END_ACTORS)}))
                   AS refused_ends
        FROM {ev} WHERE kind IN ({sql_list(EVENT_KINDS)}) GROUP BY 1),
    m AS (
        SELECT msg_id AS tid,
               list_sort(list({{'store_timestamp': store_timestamp,
                               'commit_log_offset': commit_log_offset, 'topic': topic,
                               'queue_id': queue_id, 'queue_offset': queue_offset,
                               'producer_group': producer_group}})) AS delivered_messages,
               count(*) FILTER (WHERE store_timestamp {window})::INTEGER AS delivered_in_window,
               min(store_timestamp) AS visible_timestamp
        FROM log WHERE {deliverable}
             AND ((sys_flag & {SYS_FLAG_TRANSACTION_ROLLBACK_TYPE}) = {SYS_FLAG_TRANSACTION_COMMIT_TYPE}
                  OR prepared_transaction_offset IS NOT NULL)
        GROUP BY 1),
    per_delivery AS (
        SELECT msg_id AS tid, consumer_group, commit_log_offset,
               min(timestamp) FILTER (WHERE kind = 'delivered') AS first_delivered_timestamp,
               count(*) FILTER (WHERE kind = 'delivered')::INTEGER AS attempts,
               min(timestamp) FILTER (WHERE kind = 'acked') AS acked_timestamp,
               min(timestamp) FILTER (WHERE kind = 'dead_lettered') AS dead_lettered_timestamp
        FROM {dev} GROUP BY ALL),
    d AS (
        SELECT tid, list({{'consumer_group': consumer_group,
                          'commit_log_offset': commit_log_offset,
                          'first_delivered_timestamp': first_delivered_timestamp,
                          'attempts': attempts, 'acked_timestamp': acked_timestamp,
                          'dead_lettered_timestamp': dead_lettered_timestamp}}) AS deliveries,
               min(first_delivered_timestamp) AS first_delivered
        FROM per_delivery GROUP BY 1),
    ids AS (SELECT tid FROM h UNION SELECT tid FROM m
            UNION SELECT tid FROM e WHERE check_events IS NOT NULL),
    joined AS (
        SELECT ids.tid, h.* EXCLUDE (tid), r.* EXCLUDE (tid), e.* EXCLUDE (tid),
               m.* EXCLUDE (tid), d.* EXCLUDE (tid),
               coalesce(h.half_timestamp {window}, false) AS judged,
               -- The latest of the last resolution, discard and resume; on one millisecond a
               -- resolution wins, then a resume (it can only follow a discard).
               greatest(CASE WHEN r.last IS NOT NULL
                             THEN (r.last.resolved_timestamp, 2, 0, r.last.action) END,
                        CASE WHEN e.discard IS NOT NULL
                             THEN (e.discard.timestamp, 0, e.discard.id, 'discarded') END,
                        CASE WHEN e.resume IS NOT NULL
                             THEN (e.resume.timestamp, 1, e.resume.id, 'resumed') END) AS latest
        FROM ids LEFT JOIN h USING (tid) LEFT JOIN r USING (tid) LEFT JOIN e USING (tid)
             LEFT JOIN m USING (tid) LEFT JOIN d USING (tid)
        WHERE coalesce(h.half_timestamp {window}, false) OR m.delivered_in_window > 0
              OR e.check_events IS NOT NULL),
    facts AS (
        SELECT *, CASE latest[4] WHEN 'COMMIT' THEN 'COMMITTED' WHEN 'ROLLBACK' THEN 'ROLLED_BACK'
                  WHEN 'discarded' THEN 'DISCARDED' ELSE 'PREPARED' END AS final_state
        FROM joined)
    SELECT tid AS transaction_id, tid AS msg_id, judged, half.pg AS producer_group,
           half.topic AS topic, half.rqid AS queue_id, half.qid AS half_queue_id,
           half.qoff AS half_queue_offset, half.clo AS half_commit_log_offset, half_timestamp,
           coalesce(half_messages, 0) AS half_messages,
           -- The checks after the last resume, in event id order (as the rebuild counts).
           CASE WHEN resume IS NULL THEN len(coalesce(check_timestamps, []))
                ELSE len(list_filter(check_events,
                                     lambda c: c.kind = 'check_sent' AND c.id > resume.id))
           END::INTEGER AS check_times,
           coalesce(check_timestamps, []) AS check_timestamps,
           list_max(check_timestamps) AS last_check_timestamp,
           coalesce(checks_undelivered, 0) AS checks_undelivered,
           last.action AS end_action, last.resolved_timestamp AS end_timestamp,
           last.resolved_by AS resolved_by,
           coalesce(resolutions, []) AS resolutions,
           first_commit.resolved_timestamp AS first_commit_timestamp,
           first_commit.resolved_by AS first_commit_by,
           final_state, discard.timestamp AS discard_timestamp, discard.reason AS discard_reason,
           coalesce(discards, 0) AS discards, coalesce(resumes, 0) AS resumes,
           coalesce(list_transform(delivered_messages, lambda x: x.commit_log_offset), [])
               AS delivered_commit_log_offsets,
           coalesce(delivered_messages, []) AS delivered_messages,
           coalesce(delivered_in_window, 0) AS delivered_in_window, visible_timestamp,
           coalesce(deliveries, []) AS deliveries,
           CASE WHEN final_state IN ('COMMITTED', 'ROLLED_BACK') THEN last.resolved_timestamp - half_timestamp
           END AS resolution_latency_ms,
           visible_timestamp - first_commit.resolved_timestamp AS visibility_latency_ms,
           first_delivered - visible_timestamp AS first_delivery_latency_ms,
           coalesce(op_doubles, []) AS op_doubles,
           coalesce(discard_resume_events, []) AS discard_resume_events,
           coalesce(refused_ends, []) AS refused_ends, coalesce(check_events, []) AS check_events
    FROM facts"""


def reach_sql(archive_uri: str, p: ReconcileParams) -> str:
    """The consumer groups' reach: the highest queue offset each group had delivery events for,
    per queue (consumer_group, topic, queue_id, max_queue_offset)."""
    dev = _source(archive_uri, "delivery_events", p.since_ms - p.file_reserved_ms, p.as_of_ms)
    return (
        "SELECT consumer_group, topic, queue_id, max(queue_offset) AS max_queue_offset "
        f"FROM {dev} GROUP BY ALL"
    )


def scheduled_sql(archive_uri: str, p: ReconcileParams) -> str:
    """scheduled_undelivered (``ANOMALY_COLUMNS``): per delay or timer message stored on the
    timer topic, due in the window and past its grace by as_of, with neither a copy on its
    topic (same msg_id and due time) nor a recall's delete marker (``<topic>+<msg_id>``, same
    due time) in the logs read."""
    log = _source(archive_uri, "commit_log", p.since_ms - p.file_reserved_ms, p.as_of_ms)
    grace = scheduled_grace_ms(p)
    evidence = (
        "{'commit_log_offset': s.commit_log_offset, 'queue_id': s.real_queue_id, "
        "'scheduled_timestamp': s.store_timestamp, 'delivery_timestamp': s.delivery_timestamp, "
        f"'grace_ms': {grace}::BIGINT, 'as_of': {p.as_of_ms}::BIGINT}}"
    )
    return f"""
    WITH log AS (SELECT * FROM {log} WHERE delivery_timestamp IS NOT NULL)
    SELECT '{AnomalyKind.SCHEDULED_UNDELIVERED.value}' AS kind, '' AS transaction_id,
           s.msg_id, coalesce(s.producer_group, '') AS producer_group,
           s.real_topic AS topic, to_json({evidence})::VARCHAR AS evidence
    FROM log s
    WHERE s.topic = '{TIMER_TOPIC}' AND s.timer_del_uniq_key IS NULL
          AND s.real_topic IS NOT NULL
          AND s.delivery_timestamp >= {p.since_ms} AND s.delivery_timestamp < {p.until_ms}
          AND s.delivery_timestamp + {grace} <= {p.as_of_ms}
          AND NOT EXISTS (SELECT 1 FROM log c WHERE c.topic <> '{TIMER_TOPIC}'
                          AND c.topic = s.real_topic AND c.msg_id = s.msg_id
                          AND c.delivery_timestamp = s.delivery_timestamp)
          AND NOT EXISTS (SELECT 1 FROM log r WHERE r.topic = '{TIMER_TOPIC}'
                          AND r.timer_del_uniq_key = s.real_topic || '+' || s.msg_id
                          AND r.delivery_timestamp = s.delivery_timestamp)"""


def same_work(
    archive_uri: str,
    output_uri: str,
    params: ReconcileParams,
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
) -> dict[str, int]:
    """Write ``facts/``, ``anomalies/``, ``buckets/`` and ``analytics/`` under ``output_uri``
    (a local path; each replaced) for ``params`` over the archive at ``archive_uri`` (a local
    path), as ``broker.pipeline.reconcile.reconcile`` does. Returns the anomaly counts by kind
    (only kinds found). ``threads``: DuckDB's threads (default: all cores); ``memory_limit``:
    DuckDB's (``"4GB"``; default 80% of the machine's memory; past it DuckDB spills to disk)."""
    import duckdb

    out = Path(output_uri)
    con = duckdb.connect()
    try:
        con.execute("SET preserve_insertion_order = false")
        # Spark's order: ascending with nulls first, in lists and in sort keys alike.
        con.execute("SET default_null_order = 'nulls_first'")
        if threads:
            con.execute(f"SET threads = {threads}")
        if memory_limit:
            con.execute(f"SET memory_limit = '{memory_limit}'")
        parquet_copy(con, facts_sql(archive_uri, params), out / "facts")
        con.execute(f"CREATE TEMP TABLE reach AS {reach_sql(archive_uri, params)}")
        con.execute(f"CREATE TEMP TABLE scheduled AS {scheduled_sql(archive_uri, params)}")
        return outputs_write(con, out, params)
    finally:
        con.close()

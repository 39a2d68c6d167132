"""The one bulk seed of the benchmarks: a broker's rows after a history of transactions.

``history_seed`` fills a migrated database with SQL (``COPY`` of generated ids, then
``INSERT ... SELECT``): the rows ``transaction_prepare``, ``transaction_end`` /
``transaction_resolve_locked`` and ``op_flush`` leave behind after ``history`` resolved
transactions, with ``pending`` PREPARED ones interleaved and due for a check.
``resolved_append`` adds resolved transactions (row, resolution, check event) after it.
Both check first that they fill every column the migrations made NOT NULL without a default
(``columns_check``): a new model field stops the seed with its name, not a PostgreSQL error.
Used by scan_cost.py, metrics_cost.py and console_latency.py; see bench/README.md.
"""

from __future__ import annotations

import os
import random
import re
import time
import zlib
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.sql
from throughput import Pg

# What the seed mirrors (broker.constants and the defaults of broker/rules/broker_settings.py).
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
OP_REMOVE_TAG = "d"
SYS_FLAG_PREPARED, SYS_FLAG_COMMIT = 0x4, 0x8
TOPIC, GROUP, TOPIC_QUEUES = "ScanTopic", "ScanGroup", 4
TRANSACTION_TIMEOUT_MS = 6000  # HALFMOON_TRANSACTION_TIMEOUT_MS: check_immunity_ms of each row
CHECK_INTERVAL_MS = 30000  # HALFMOON_TRANSACTION_CHECK_INTERVAL_MS
OP_MSG_MAX_SIZE = 4096  # HALFMOON_OP_MSG_MAX_SIZE
OFFSETS_PER_OP = 500  # what a loaded broker's Op messages name (fewer if 500 would not fit)
ROLLBACK_SHARE = 0.10  # of the resolved transactions; the rest commit
BY_CHECK_SHARE = 0.02  # resolved after one back-check rather than by the producer
SEED_CHECKS_MAX = 2  # checks a pending transaction already had (capped by its age)
RATE_TX_PER_S = 300  # the history's pace: 1,000,000 transactions span ~56 minutes
TAIL_MS = 60_000  # the newest transaction was born this long before the seed


def generated_transactions(
    history: int, pending: int, half_queues: int, seed: int
) -> Iterator[tuple[int, str, int, int, str, bool]]:
    """(seq, transaction id, half queue, real queue, kind, resolved by a check) in birth order.

    Ids are 32 upper-case hex digits like ``new_msg_id``; the half queue is
    ``half_queue_select`` (CRC32 of ``half:<id>``) and the real queue ``queue_select`` (CRC32
    of the id), as ``transaction_prepare`` computes them. kind: P (pending, spread evenly through
    the history), C (committed) or R (rolled back).
    """
    rng = random.Random(seed)
    total = history + pending
    pending_at = {((2 * j + 1) * total) // (2 * pending) for j in range(pending)}
    for seq in range(total):
        tid = f"{rng.getrandbits(128):032X}"
        hq = zlib.crc32(b"half:" + tid.encode()) % half_queues
        rq = zlib.crc32(tid.encode()) % TOPIC_QUEUES
        if seq in pending_at:
            yield seq, tid, hq, rq, "P", False
        else:
            kind = "R" if rng.random() < ROLLBACK_SHARE else "C"
            yield seq, tid, hq, rq, kind, rng.random() < BY_CHECK_SHARE


def _seed_sql(
    *, now: int, total: int, half_queues: int, offsets_per_op: int, check_url: str, secret: str
) -> list[tuple[str, dict[str, Any]]]:
    """The statements that turn the staged ids (temp table ``seed_tx``) into a broker's rows."""
    p: dict[str, Any] = {
        "now": now,
        "total": total,
        "rate": RATE_TX_PER_S,
        "tail": TAIL_MS,
        "immunity": TRANSACTION_TIMEOUT_MS,
        "interval": CHECK_INTERVAL_MS,
        "max_checks": SEED_CHECKS_MAX,
        "per_op": offsets_per_op,
        "topic": TOPIC,
        "group": GROUP,
        "half": HALF_TOPIC,
        "op": OP_HALF_TOPIC,
        "tag_op": OP_REMOVE_TAG,
        "flag_prepared": SYS_FLAG_PREPARED,
        "flag_commit": SYS_FLAG_COMMIT,
        "queues": TOPIC_QUEUES,
        "half_queues": half_queues,
        "check_url": check_url,
        "secret": secret,
        "check_group": CHECK_GROUP,
        "pad": (b"lorem ipsum dolor " * 60)[:1022],  # bodies: 1,024 bytes of JSON
        "body_end": b'"}',
        "created": now - total * 1000 // RATE_TX_PER_S - TAIL_MS - 3_600_000,
    }
    # Every transaction, with its offsets and times. seq is the birth order; commit log offsets
    # are 3*seq+1 (half message), 3*seq+2 (delivered copy) and 3*seq+3 (an Op message flushed
    # right after the transaction that filled it), so the commit log interleaves them as a broker
    # appends them. A pending transaction had up to SEED_CHECKS_MAX checks (as many as its age
    # allows), one interval apart; its next check is due.
    stage = """
        CREATE TEMP TABLE seed AS
        SELECT s.*,
               row_number() OVER (PARTITION BY hq ORDER BY seq) - 1 AS hqo,
               CASE WHEN kind = 'C'
                    THEN row_number() OVER (PARTITION BY rq, kind = 'C' ORDER BY seq) - 1 END AS rqo,
               %(now)s - (%(total)s - seq) * 1000 / %(rate)s - %(tail)s AS born,
               'order-' || seq AS keys,
               CASE WHEN kind = 'P' THEN least(%(max_checks)s, greatest(0,
                    (%(now)s - (%(total)s - seq) * 1000 / %(rate)s - %(tail)s - %(immunity)s
                     - 1000) / %(interval)s)) ELSE 0 END AS pending_checks
        FROM seed_tx s
    """
    times = """
        CREATE TEMP TABLE seed_t AS
        SELECT s.*,
               CASE WHEN kind = 'P' THEN NULL
                    WHEN by_check THEN born + %(immunity)s + 7
                    ELSE born + 2 END AS resolved_ts,
               CASE WHEN kind = 'P' THEN pending_checks WHEN by_check THEN 1 ELSE 0 END
                   AS check_times
        FROM seed s
    """
    # Op messages: each half queue's resolved offsets in order, OFFSETS_PER_OP per message (what
    # op_flush writes under load: one message up to HALFMOON_OP_MSG_MAX_SIZE bytes).
    op_chunks = """
        CREATE TEMP TABLE seed_res AS
        SELECT seq, tid, hq, hqo, kind, by_check, resolved_ts,
               (row_number() OVER (PARTITION BY hq ORDER BY hqo) - 1) / %(per_op)s AS opo
        FROM seed_t WHERE kind <> 'P'
    """
    ops = """
        CREATE TEMP TABLE seed_op AS
        SELECT hq, opo, 3 * max(seq) + 3 AS clo, max(hqo) AS last_hqo,
               string_agg(hqo::text || ',', '' ORDER BY hqo) AS body,
               max(resolved_ts) + 1 AS stored
        FROM seed_res GROUP BY hq, opo
    """
    config = """
        INSERT INTO broker_topic (name, queue_nums, system, created_timestamp) VALUES
            (%(topic)s, %(queues)s, false, %(created)s),
            (%(half)s, %(half_queues)s, true, %(created)s + 1000),
            (%(op)s, %(half_queues)s, true, %(created)s + 2000);
        INSERT INTO broker_producergroup (name, check_url, check_secret, created_timestamp,
            unreachable_since, last_check_error, last_poll_timestamp, check_failures,
            check_backoff_until)
        VALUES (%(group)s, %(check_url)s, %(secret)s, %(created)s, NULL, '', NULL, 0, NULL);
    """
    # The commit log in commit log offset order: half messages as transaction_prepare stores
    # them, delivered copies as transaction_resolve_locked does (half-only properties stripped,
    # prepared_transaction_offset set), Op messages as op_flush does.
    messages = """
        INSERT INTO broker_message (commit_log_offset, topic, queue_id, queue_offset, msg_id,
            tags, keys, body, body_is_text, properties, sys_flag, producer_group, born_timestamp,
            store_timestamp, prepared_transaction_offset)
        SELECT m.clo, m.topic, m.queue_id, m.queue_offset, m.msg_id, m.tags, m.keys,
               CASE WHEN m.seq IS NULL THEN convert_to(m.op_body, 'UTF8')
                    ELSE substring(convert_to('{"order":' || m.seq || ',"amount":'
                        || (m.seq * 7919 %% 100000) || ',"note":"', 'UTF8') || %(pad)s, 1, 1022)
                        || %(body_end)s END,
               true, m.properties, m.sys_flag, m.producer_group, m.born, m.stored, m.pto
        FROM (
            SELECT 3 * seq + 1 AS clo, %(half)s AS topic, hq AS queue_id, hqo AS queue_offset,
                   tid AS msg_id, 'TagA' AS tags, keys, seq, NULL AS op_body,
                   jsonb_build_object('order_id', seq::text, 'REAL_TOPIC', %(topic)s,
                       'REAL_QID', rq::text, 'TRAN_MSG', 'true', 'PGROUP', %(group)s,
                       'UNIQ_KEY', tid) AS properties,
                   %(flag_prepared)s AS sys_flag, %(group)s AS producer_group, born,
                   born AS stored, NULL::bigint AS pto
            FROM seed_t
            UNION ALL
            SELECT 3 * seq + 2, %(topic)s, rq, rqo, tid, 'TagA', keys, seq, NULL,
                   jsonb_build_object('order_id', seq::text, 'PGROUP', %(group)s,
                       'UNIQ_KEY', tid),
                   %(flag_commit)s, %(group)s, born, resolved_ts, 3 * seq + 1
            FROM seed_t WHERE kind = 'C'
            UNION ALL
            SELECT clo, %(op)s, hq, opo, upper(replace(gen_random_uuid()::text, '-', '')),
                   %(tag_op)s, '', NULL, body, '{}'::jsonb, 0, '', stored, stored, NULL
            FROM seed_op
        ) m
        ORDER BY m.clo
    """
    transactions = """
        INSERT INTO broker_transaction (transaction_id, producer_group, producer_client_id,
            topic, queue_id, tags, keys, half_queue_id, half_queue_offset, half_commit_log_offset,
            state, check_times, check_immunity_ms, born_timestamp, next_check_timestamp,
            last_check_timestamp, undelivered_checks, resolved_timestamp, resolved_by,
            queue_offset, discard_reason)
        SELECT tid, %(group)s, '', %(topic)s, rq, 'TagA', keys, hq, hqo, 3 * seq + 1,
               CASE kind WHEN 'P' THEN 'PREPARED' WHEN 'C' THEN 'COMMITTED'
                   ELSE 'ROLLED_BACK' END,
               check_times, %(immunity)s, born,
               CASE WHEN kind = 'P'  -- due by the seed's end, however short the history
                   THEN LEAST(born + %(immunity)s + check_times * %(interval)s, %(now)s) END,
               CASE WHEN check_times > 0
                   THEN born + %(immunity)s + (check_times - 1) * %(interval)s + 5 END,
               0, resolved_ts,
               CASE WHEN kind = 'P' THEN NULL WHEN by_check THEN 'check' ELSE 'producer' END,
               rqo, ''
        FROM seed_t ORDER BY seq
    """
    resolutions = """
        INSERT INTO broker_resolution (transaction_id, half_queue_id, half_queue_offset, action,
            resolved_by, reason, resolved_timestamp, op_commit_log_offset)
        SELECT r.tid, r.hq, r.hqo, CASE WHEN r.kind = 'C' THEN 'COMMIT' ELSE 'ROLLBACK' END,
               CASE WHEN r.by_check THEN 'check' ELSE 'producer' END, '', r.resolved_ts, o.clo
        FROM seed_res r JOIN seed_op o ON o.hq = r.hq AND o.opo = r.opo
        ORDER BY r.resolved_ts, r.seq
    """
    # The check journal: the checks the pending transactions had (answered UNKNOW) and the one
    # check that resolved the BY_CHECK_SHARE (answered COMMIT_MESSAGE / ROLLBACK_MESSAGE).
    events = """
        INSERT INTO broker_transactionevent (transaction_id, kind, timestamp, check_times,
            outcome, actor, detail)
        SELECT tid, 'check_sent', ts, n, outcome, 'http',
               '{"status_code": 200, "error": ""}'::jsonb
        FROM (
            SELECT tid, born + %(immunity)s + (n - 1) * %(interval)s + 5 AS ts, n,
                   'UNKNOW' AS outcome, seq
            FROM seed_t, generate_series(1, check_times) AS n WHERE kind = 'P'
            UNION ALL
            SELECT tid, born + %(immunity)s + 5, 1,
                   CASE WHEN kind = 'C' THEN 'COMMIT_MESSAGE' ELSE 'ROLLBACK_MESSAGE' END, seq
            FROM seed_t WHERE by_check
        ) e
        ORDER BY ts, seq
    """
    # Queue counters (max_offset = next offset), the CID_RMQ_SYS_TRANS checkpoints where
    # checkpoint_advance leaves them (half: the first pending offset; Op: the first Op message
    # naming an offset at or past it), the scan leases as lease_release leaves them.
    counters = """
        INSERT INTO broker_consumequeue (topic, queue_id, max_offset)
        SELECT %(topic)s, q, (SELECT count(*) FROM seed_t WHERE kind = 'C' AND rq = q)
        FROM generate_series(0, %(queues)s - 1) AS q
        UNION ALL
        SELECT %(half)s, q, (SELECT count(*) FROM seed_t WHERE hq = q)
        FROM generate_series(0, %(half_queues)s - 1) AS q
        UNION ALL
        SELECT %(op)s, q, (SELECT count(*) FROM seed_op WHERE hq = q)
        FROM generate_series(0, %(half_queues)s - 1) AS q;
        CREATE TEMP TABLE seed_ckpt AS
        SELECT q, coalesce((SELECT min(hqo) FROM seed_t WHERE hq = q AND kind = 'P'),
                           (SELECT count(*) FROM seed_t WHERE hq = q)) AS half_ckpt
        FROM generate_series(0, %(half_queues)s - 1) AS q;
        INSERT INTO broker_consumeroffset (consumer_group, topic, queue_id, "offset")
        SELECT %(check_group)s, %(half)s, q, half_ckpt FROM seed_ckpt
        UNION ALL
        SELECT %(check_group)s, %(op)s, q,
               coalesce((SELECT min(opo) FROM seed_op o WHERE o.hq = q AND o.last_hqo >= half_ckpt),
                        (SELECT count(*) FROM seed_op o WHERE o.hq = q))
        FROM seed_ckpt;
        INSERT INTO broker_scanlease (name, owner, expires_timestamp)
        SELECT 'check:' || q, '', 0 FROM generate_series(0, %(half_queues)s - 1) AS q;
    """
    sequences = """
        SELECT setval(pg_get_serial_sequence('broker_message', 'commit_log_offset'),
                      (SELECT max(commit_log_offset) FROM broker_message));
        SELECT setval(pg_get_serial_sequence('broker_resolution', 'id'),
                      (SELECT max(id) FROM broker_resolution));
        SELECT setval(pg_get_serial_sequence('broker_transactionevent', 'id'),
                      greatest(1, (SELECT max(id) FROM broker_transactionevent)));
    """
    return [
        ("stage", {"sql": stage, **p}),
        ("times", {"sql": times, **p}),
        ("op chunks", {"sql": op_chunks, **p}),
        ("op messages", {"sql": ops, **p}),
        ("topics, group", {"sql": config, **p}),
        ("commit log", {"sql": messages, **p}),
        ("transactions", {"sql": transactions, **p}),
        ("resolutions", {"sql": resolutions, **p}),
        ("check journal", {"sql": events, **p}),
        ("queues, checkpoints, leases", {"sql": counters, **p}),
        ("sequences", {"sql": sequences, **p}),
    ]


BULK_TABLES = [
    "broker_message",
    "broker_transaction",
    "broker_resolution",
    "broker_transactionevent",
]


def indexes_drop(conn: psycopg.Connection) -> list[psycopg.sql.Composable]:
    """Drop the keys, indexes and foreign keys of the bulk-loaded tables (``BULK_TABLES``, and
    foreign keys pointing at them); return the statements that recreate them exactly as the
    migrations made them (same names and definitions), in an order that works. Loading first
    and indexing after is ~10x faster than maintaining a dozen indexes row by row."""
    foreign = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype = 'f' AND (conrelid::regclass::text = ANY(%s)"
        " OR confrelid::regclass::text = ANY(%s))",
        [BULK_TABLES, BULK_TABLES],
    ).fetchall()
    keys = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype IN ('p', 'u') AND conrelid::regclass::text = ANY(%s)",
        [BULK_TABLES],
    ).fetchall()
    indexes = conn.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = 'public'"
        " AND i.tablename = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c"
        " WHERE c.conname = i.indexname AND c.contype IN ('p', 'u'))",
        [BULK_TABLES],
    ).fetchall()
    for table, name, _ in [*foreign, *keys]:
        conn.execute(
            psycopg.sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                psycopg.sql.Identifier(table), psycopg.sql.Identifier(name)
            )
        )
    for name, _ in indexes:
        conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(psycopg.sql.Identifier(name)))
    add = psycopg.sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format
    return [
        *(
            add(psycopg.sql.Identifier(t), psycopg.sql.Identifier(n)) + psycopg.sql.SQL(d)
            for t, n, d in keys
        ),
        *(psycopg.sql.SQL(d) for _, d in indexes),
        *(
            add(psycopg.sql.Identifier(t), psycopg.sql.Identifier(n)) + psycopg.sql.SQL(d)
            for t, n, d in foreign
        ),
    ]


def history_seed(
    pg: Pg, dbname: str, *, history: int, pending: int, half_queues: int, check_url: str
) -> None:
    """Fill the migrated database ``dbname`` with ``history`` resolved and ``pending`` PREPARED
    transactions, then VACUUM ANALYZE and CHECKPOINT. Prints what it wrote and how long it took."""
    t0 = time.monotonic()
    total = history + pending
    digits = len(str(max(1, total // half_queues * 2)))
    per_op = min(OFFSETS_PER_OP, OP_MSG_MAX_SIZE // (digits + 1))
    now = time.time_ns() // 1_000_000
    secret = os.urandom(32).hex()  # producer_group_create: secrets.token_hex(32)
    with pg.connect(dbname) as conn:
        statements = _seed_sql(
            now=now,
            total=total,
            half_queues=half_queues,
            offsets_per_op=per_op,
            check_url=check_url,
            secret=secret,
        )
        columns_check(conn, "\n".join(params["sql"] for _, params in statements))
        conn.execute("SET work_mem = '256MB'")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(
            "CREATE TEMP TABLE seed_tx (seq bigint PRIMARY KEY, tid text NOT NULL, hq int NOT NULL,"
            " rq int NOT NULL, kind text NOT NULL, by_check bool NOT NULL)"
        )
        copy_sql = "COPY seed_tx (seq, tid, hq, rq, kind, by_check) FROM STDIN"
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for row in generated_transactions(history, pending, half_queues, seed=total):
                copy.write_row(row)
        steps = [f"ids {time.monotonic() - t0:.1f} s"]
        t = time.monotonic()
        rebuild = indexes_drop(conn)
        steps.append(f"drop indexes {time.monotonic() - t:.1f} s")
        for label, params in statements:
            t = time.monotonic()
            sql_text = params.pop("sql")
            with psycopg.ClientCursor(conn) as cur:  # client-side binding: DDL takes no $1
                for statement in filter(str.strip, sql_text.split(";\n")):
                    cur.execute(statement, params)
            steps.append(f"{label} {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        for statement in rebuild:
            conn.execute(statement)
        steps.append(f"rebuild indexes and constraints {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        conn.execute("VACUUM ANALYZE")
        steps.append(f"vacuum analyze {time.monotonic() - t:.1f} s")
        conn.execute("CHECKPOINT")
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM broker_message WHERE topic = %s),"
            " (SELECT count(*) FROM broker_message WHERE topic = %s),"
            " (SELECT count(*) FROM broker_message WHERE topic = %s),"
            " (SELECT count(*) FROM broker_transaction WHERE state = 'PREPARED'),"
            " (SELECT count(*) FROM broker_resolution),"
            " (SELECT count(*) FROM broker_transactionevent),"
            " pg_size_pretty(pg_database_size(current_database()))",
            [HALF_TOPIC, TOPIC, OP_HALF_TOPIC],
        ).fetchone()
    print(
        f"{dbname}: seeded in {time.monotonic() - t0:.1f} s ({', '.join(steps)}): "
        f"{counts[0]} half messages, {counts[1]} delivered, {counts[2]} Op messages "
        f"(~{per_op} offsets each), {counts[4]} resolutions, {counts[3]} PREPARED, "
        f"{counts[5]} check events; database {counts[6]}",
        flush=True,
    )


_INSERT = re.compile(r"INSERT INTO (\w+) \(([^)]*)\)", re.IGNORECASE)


def columns_check(conn: psycopg.Connection, sql_text: str) -> None:
    """Raise SystemExit naming the NOT NULL columns without a default (identity columns aside)
    that an ``INSERT INTO table (columns)`` of ``sql_text`` leaves out."""
    missing = []
    for table, cols in _INSERT.findall(sql_text):
        given = {c.strip().strip('"') for c in cols.split(",")}
        required = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public'"
            " AND table_name = %s AND is_nullable = 'NO' AND column_default IS NULL"
            " AND is_identity = 'NO'",
            [table],
        ).fetchall()
        missing += [f"{table}.{name}" for (name,) in required if name not in given]
    if missing:
        raise SystemExit(
            f"bench/history_seed.py does not fill {', '.join(sorted(set(missing)))}: the models "
            "have fields it predates; add them as the services write them"
        )


_APPEND = """
    INSERT INTO broker_transaction (transaction_id, producer_group, producer_client_id, topic,
        queue_id, tags, keys, half_queue_id, half_queue_offset, half_commit_log_offset, state,
        check_times, check_immunity_ms, born_timestamp, next_check_timestamp,
        last_check_timestamp, undelivered_checks, resolved_timestamp, resolved_by, queue_offset,
        discard_reason)
    SELECT upper(replace(gen_random_uuid()::text, '-', '')), %(group)s, '', %(topic)s,
        i %% %(queues)s, 'TagA', 'order-' || i, i %% %(half_queues)s,
        %(half_base)s + i / %(half_queues)s, %(clo_base)s + 3 * i,
        CASE WHEN i %% 10 = 1 THEN 'ROLLED_BACK' ELSE 'COMMITTED' END, 0, %(immunity)s,
        %(now)s - 2, NULL, NULL, 0, %(now)s, 'producer',
        CASE WHEN i %% 10 <> 1 THEN %(queue_base)s + i END, ''
    FROM generate_series(0, %(count)s - 1) AS i;
    INSERT INTO broker_resolution (transaction_id, half_queue_id, half_queue_offset, action,
        resolved_by, reason, resolved_timestamp, op_commit_log_offset)
    SELECT transaction_id, half_queue_id, half_queue_offset,
        CASE state WHEN 'COMMITTED' THEN 'COMMIT' ELSE 'ROLLBACK' END, resolved_by, '',
        resolved_timestamp, half_commit_log_offset + 2
    FROM broker_transaction WHERE half_commit_log_offset >= %(clo_base)s
    ORDER BY half_commit_log_offset;
    INSERT INTO broker_transactionevent (transaction_id, kind, timestamp, check_times, outcome,
        actor, detail)
    SELECT transaction_id, 'check_sent', born_timestamp + 1, 1, 'UNKNOW', 'http',
        '{"status_code": 200, "error": ""}'::jsonb
    FROM broker_transaction WHERE half_commit_log_offset >= %(clo_base)s
        AND half_commit_log_offset %% 2 = 0
"""


def resolved_append(conn: psycopg.Connection, count: int) -> None:
    """Add ``count`` transactions resolved just now by their producer (9 in 10 committed) on the
    seeded topic, each with its ``Resolution``, and a ``check_sent`` event for about half: what
    a busy broker adds between two scrapes. Their offsets follow every row already there."""
    half_base, clo_base, queue_base = conn.execute(
        "SELECT coalesce(max(half_queue_offset), 0) + 1, coalesce(max(half_commit_log_offset),"
        " 0) + 3, coalesce(max(queue_offset), 0) + 1 FROM broker_transaction"
    ).fetchone()
    params = {
        "group": GROUP,
        "topic": TOPIC,
        "queues": TOPIC_QUEUES,
        "half_queues": conn.execute(
            "SELECT queue_nums FROM broker_topic WHERE name = %s", [HALF_TOPIC]
        ).fetchone()[0],
        "half_base": half_base,
        "clo_base": clo_base,
        "queue_base": queue_base,
        "immunity": TRANSACTION_TIMEOUT_MS,
        "now": time.time_ns() // 1_000_000,
        "count": count,
    }
    with psycopg.ClientCursor(conn) as cur:
        for statement in filter(str.strip, _APPEND.split(";\n")):
            cur.execute(statement, params)


def size_label(n: int) -> str:
    """100000 -> 100k, 1000000 -> 1m."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)

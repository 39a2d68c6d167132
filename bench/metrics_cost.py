"""What one ``/metrics`` scrape costs with 10,000 and with 1,000,000 resolved transactions in
history.

    .venv/bin/python bench/metrics_cost.py [--scrapes 21] [--new 500] [--rounds 3] [--reuse]

For each history size the bench:

1. drops and recreates the database ``bench_metrics_10k`` / ``bench_metrics_1m`` on
   ``postgres://postgres@127.0.0.1:5432`` (``--server`` to change), migrates it and seeds it
   with SQL (``INSERT ... SELECT generate_series``): the rows the services leave behind, that
   many resolved ``Transaction`` rows on four topics (9 in 10 committed, latencies spread over
   every bucket) each with its ``Resolution``, one ``check_sent`` event per two transactions,
   and 1,000 PREPARED transactions interleaved through the history; then ``VACUUM ANALYZE``;
2. in a Django process of its own (``--rounds`` times, alternating between the sizes so both
   see the same machine), scrapes ``/metrics`` once untimed (the first scrape folds
   the whole history into the rollup), then ``--scrapes`` timed scrapes (a call of the view
   that serves ``/metrics``, ``broker.api.health.metrics``, with its SQL), each after ``--new`` new transactions were resolved (as SQL, untimed: a
   ``Transaction`` row, its ``Resolution`` and a check event each), so every timed scrape
   folds what a busy broker resolved since the previous one. It also times the same scrape
   with nothing new, and the three ``GROUP BY`` statements the collector ran before the
   rollup, and prints the ``EXPLAIN`` of the half-message gauge.

The last line::

    scrape_ms_10k=<n> scrape_ms_1m=<n> ratio=<1m / 10k>

(medians). The target is ratio <= 1.2: a scrape costs what changed, not the history. See
bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432"
SIZES = {"10k": 10_000, "1m": 1_000_000}
PENDING = 1_000
TOPICS = 4
# The collector before the rollup: a GROUP BY over the whole tables on every scrape.
OLD_STATEMENTS = (
    "SELECT topic, state, COUNT(*) FROM broker_transaction GROUP BY topic, state",
    "SELECT topic, COUNT(*), SUM(resolved_timestamp - born_timestamp), "
    + ", ".join(
        f"SUM(CASE WHEN resolved_timestamp - born_timestamp <= {ms} THEN 1 ELSE 0 END)"
        for ms in (5000, 60000, 600000, 3600000, 43200000, 86400000)
    )
    + " FROM broker_transaction WHERE state IN ('COMMITTED', 'ROLLED_BACK') GROUP BY topic",
    "SELECT kind, outcome, COUNT(*) FROM broker_transactionevent GROUP BY kind, outcome",
)
GAUGE = "SELECT topic, COUNT(*) FROM broker_transaction WHERE state = 'PREPARED' GROUP BY topic"

# Rows numbered i in [first, last]: every (step)th is PREPARED, the rest resolved; the
# latency (resolved - born) cycles through 0 .. ~14 h, so every bucket fills.
_TRANSACTIONS = """
INSERT INTO broker_transaction (transaction_id, producer_group, topic, queue_id, tags, keys,
    half_queue_id, half_queue_offset, half_commit_log_offset, state, check_times,
    check_immunity_ms, born_timestamp, next_check_timestamp, last_check_timestamp,
    undelivered_checks, resolved_timestamp, resolved_by, queue_offset, discard_reason)
SELECT lpad(to_hex(i), 32, '0'), 'BenchGroup', 'BenchTopic' || (i % {topics}), i % 4, '', '',
    i % 4, i / 4, i,
    CASE WHEN i % {step} = 0 THEN 'PREPARED' WHEN i % 10 = 1 THEN 'ROLLED_BACK'
         ELSE 'COMMITTED' END,
    0, 6000, {base} + i,
    CASE WHEN i % {step} = 0 THEN {base} + i + 6000 END, NULL, 0,
    CASE WHEN i % {step} <> 0 THEN {base} + i + (i::bigint * 7919) % 50000000 END,
    CASE WHEN i % {step} <> 0 THEN 'producer' END,
    CASE WHEN i % {step} <> 0 AND i % 10 <> 1 THEN i END, ''
FROM generate_series({first}, {last}) AS i
"""
_RESOLUTIONS = """
INSERT INTO broker_resolution (transaction_id, half_queue_id, half_queue_offset, action,
    resolved_by, reason, resolved_timestamp, op_commit_log_offset)
SELECT transaction_id, half_queue_id, half_queue_offset,
    CASE state WHEN 'COMMITTED' THEN 'COMMIT' ELSE 'ROLLBACK' END, resolved_by, '',
    resolved_timestamp, half_commit_log_offset + 1
FROM broker_transaction
WHERE state IN ('COMMITTED', 'ROLLED_BACK') AND born_timestamp BETWEEN {base} + {first} AND {base} + {last}
ORDER BY resolved_timestamp
"""
_EVENTS = """
INSERT INTO broker_transactionevent (transaction_id, kind, timestamp, check_times, outcome,
    actor, detail)
SELECT lpad(to_hex(i), 32, '0'), 'check_sent', {base} + i, 1,
    (ARRAY['UNKNOW', 'COMMIT_MESSAGE', 'ROLLBACK_MESSAGE', 'TIMEOUT'])[1 + i % 4], 'http', '{{}}'
FROM generate_series({first}, {last}) AS i WHERE i % 2 = 0
"""


def seed_sql(first: int, last: int, step: int, base: int) -> list[str]:
    """The statements that add transactions numbered ``first`` .. ``last`` (see above)."""
    values = {"first": first, "last": last, "step": step, "base": base, "topics": TOPICS}
    return [sql.format(**values) for sql in (_TRANSACTIONS, _RESOLUTIONS, _EVENTS)]


def env_for(database_url: str) -> dict[str, str]:
    """The environment of a Django process on ``database_url``."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", secrets.token_urlsafe(40)),
        "HALFMOON_LOG_LEVEL": "WARNING",
    }


def prepare(server: str, name: str, resolved: int) -> None:
    """Recreate, migrate and seed database ``name`` with ``resolved`` resolved transactions
    and ``PENDING`` PREPARED ones."""
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env_for(f"{server}/{name}"),
        check=True,
    )
    total = resolved + PENDING
    started = time.monotonic()
    with psycopg.connect(f"{server}/{name}", autocommit=True) as conn:
        base = int(time.time() * 1000) - total - 86_400_000
        for sql in seed_sql(1, total, total // PENDING, base):
            conn.execute(sql)
        conn.execute("VACUUM ANALYZE")
    print(f"{name}: seeded {total:,} transactions in {time.monotonic() - started:.1f} s")


def _median_ms(timings: list[float]) -> float:
    return round(statistics.median(timings) * 1000, 2)


def child(scrapes: int, new: int) -> None:
    """In the database's own Django process: time the scrapes and the old statements, print
    one JSON object."""
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from broker.api.health import metrics

    request = RequestFactory().get("/metrics")

    def timed_scrape() -> tuple[float, int]:
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = metrics(request)
            elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.status_code
        return elapsed, len(queries)

    first, _ = timed_scrape()  # folds the whole history
    with connection.cursor() as cursor:
        cursor.execute("SELECT MAX(half_commit_log_offset) FROM broker_transaction")
        top = cursor.fetchone()[0]
        cursor.execute("SELECT MAX(born_timestamp) FROM broker_transaction")
        shift = cursor.fetchone()[0] + 1 - top  # born_timestamp = shift + number, increasing
    idle, busy, query_counts = [], [], []
    for _ in range(scrapes):
        idle.append(timed_scrape()[0])
        with connection.cursor() as cursor:  # what the broker resolved since the last scrape
            for sql in seed_sql(top + 1, top + new, top + new + 1, shift):  # none PREPARED
                cursor.execute(sql)
        top += new
        elapsed, count = timed_scrape()
        busy.append(elapsed)
        query_counts.append(count)
    old = []
    with connection.cursor() as cursor:
        for _ in range(max(3, scrapes // 4)):
            started = time.perf_counter()
            for sql in OLD_STATEMENTS:
                cursor.execute(sql)
                cursor.fetchall()
            old.append(time.perf_counter() - started)
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + GAUGE)
        plan = [row[0] for row in cursor.fetchall()]
    result = {
        "first_scrape_s": [first],
        "scrape_s": busy,
        "idle_scrape_s": idle,
        "queries": query_counts,
        "old_aggregate_s": old,
        "gauge_plan": plan,
    }
    print(json.dumps(result))


def measure(server: str, name: str, scrapes: int, new: int) -> dict[str, Any]:
    """Run ``child`` on database ``name``; its figures."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--scrapes", str(scrapes), "--new", str(new)],
        cwd=ROOT,
        env=env_for(f"{server}/{name}"),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """Seed both sizes (unless ``--reuse``), measure, print the figures and the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL, no database name")
    parser.add_argument("--scrapes", type=int, default=21, help="timed scrapes per size")
    parser.add_argument("--new", type=int, default=500, help="resolutions between scrapes")
    parser.add_argument("--rounds", type=int, default=3, help="runs per size, alternating")
    parser.add_argument("--reuse", action="store_true", help="keep the seeded databases")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.scrapes, args.new)
        return 0
    if not args.reuse:
        for label, resolved in SIZES.items():
            prepare(args.server, f"bench_metrics_{label}", resolved)
    # Rounds alternate between the sizes so that both see the same machine.
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for label in SIZES:
            figures = measure(args.server, f"bench_metrics_{label}", args.scrapes, args.new)
            pooled = results.setdefault(label, {"gauge_plan": figures.pop("gauge_plan")})
            for key, values in figures.items():
                pooled.setdefault(key, []).extend(values)
    for label, figures in results.items():
        print(
            f"{label}: scrape {_median_ms(figures['scrape_s'])} ms median "
            f"({statistics.median(figures['queries']):.0f} statements; {args.new} new "
            f"resolutions folded each), with nothing new {_median_ms(figures['idle_scrape_s'])} "
            f"ms, first scrape (folds the whole history) {_median_ms(figures['first_scrape_s'][:1])} ms"
        )
        print(
            f"{label}: OLD collector's GROUP BY statements (before the rollup): "
            f"{_median_ms(figures['old_aggregate_s'])} ms per scrape"
        )
    print("plan of the half-message gauge at 1m:")
    for line in results["1m"]["gauge_plan"]:
        print(f"    {line}")
    small = _median_ms(results["10k"]["scrape_s"])
    large = _median_ms(results["1m"]["scrape_s"])
    print(f"baseline: scrape_ms_10k={small}")
    print(f"scrape_ms_10k={small} scrape_ms_1m={large} ratio={large / small:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

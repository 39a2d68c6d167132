"""What one ``/metrics`` scrape costs with 10,000 and with 1,000,000 resolved transactions in
history.

    .venv/bin/python bench/metrics_cost.py [--scrapes 21] [--new 500] [--rounds 3] [--reuse]

Per size (``--small``, ``--large``) it recreates ``<--database>_<size>`` on ``--server``,
migrates and seeds it (``history_seed``, 1,000 PREPARED), then in a Django process per
database (``--rounds``, alternating) times ``--scrapes`` calls of the view serving
``/metrics``, each after ``--new`` transactions were resolved (``resolved_append``). The last
line (medians)::

    scrape_ms_10k=<n> scrape_ms_1m=<n> ratio=<1m / 10k>

Target: ratio <= 1.2, a scrape costs what changed, not the history. See bench/README.md.
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

from history_seed import history_seed, resolved_append, size_label
from throughput import Pg, database_recreate

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432"
PENDING = 1_000
CLOSED = "http://127.0.0.1:9/check"  # the seeded group's producer: nothing checks here
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
    """Recreate, migrate and seed database ``name`` (``history_seed``) with ``resolved``
    resolved transactions and ``PENDING`` PREPARED ones."""
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        database_recreate(conn, name)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env_for(f"{server}/{name}"),
        check=True,
    )
    pg = Pg.parse(f"{server}/{name}")
    history_seed(pg, name, history=resolved, pending=PENDING, half_queues=4, check_url=CLOSED)


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
    idle, busy, query_counts = [], [], []
    raw = connection.connection  # psycopg's: what the broker resolved since the last scrape
    for _ in range(scrapes):
        idle.append(timed_scrape()[0])
        resolved_append(raw, new)
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
    parser.add_argument("--database", default="bench_metrics", help="base name: <name>_<size>")
    parser.add_argument("--small", type=int, default=10_000, help="resolved, small history")
    parser.add_argument("--large", type=int, default=1_000_000, help="resolved, large history")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = {size_label(args.small): args.small, size_label(args.large): args.large}
    if args.child:
        child(args.scrapes, args.new)
        return 0
    if not args.reuse:
        for label, resolved in sizes.items():
            prepare(args.server, f"{args.database}_{label}", resolved)
    # Rounds alternate between the sizes so that both see the same machine.
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for label in sizes:
            figures = measure(args.server, f"{args.database}_{label}", args.scrapes, args.new)
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
    small_label, large_label = sizes
    print(f"plan of the half-message gauge at {large_label}:")
    for line in results[large_label]["gauge_plan"]:
        print(f"    {line}")
    small = _median_ms(results[small_label]["scrape_s"])
    large = _median_ms(results[large_label]["scrape_s"])
    print(f"baseline: scrape_ms_10k={small}")
    print(f"scrape_ms_10k={small} scrape_ms_1m={large} ratio={large / small:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

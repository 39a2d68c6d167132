"""One thread, no HTTP server: the SQL and the CPU time of a transaction, for Halfmoon or the
bare baseline, through Django's test client (same URLs, middleware, DRF and services as under
uvicorn, minus ASGI and the network).

Run by ``bench/throughput.py`` after each HTTP measurement, against that measurement's
database::

    DATABASE_URL=postgres://.../halfmoon_bench .venv/bin/python bench/inprocess.py halfmoon \\
        --token TOKEN [--repeat 100] [--verbose]
    DATABASE_URL=postgres://.../halfmoon_bench_bare .venv/bin/python bench/inprocess.py bare

It prints the statements of one transaction (``django.test.utils.CaptureQueriesContext``), then
CPU and wall milliseconds per transaction over ``--repeat`` more. CPU time of one thread hardly
depends on what else runs on the machine, so it is the steadiest figure to compare across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
BODY = "x" * 1024


def _summary(sql: str) -> str:
    """The statement's verb and table, e.g. ``UPDATE broker_consumequeue``."""
    words = sql.replace('"', "").split()
    if not words:
        return "?"
    verb = words[0].upper()
    marker = {"SELECT": "FROM", "DELETE": "FROM", "INSERT": "INTO", "UPDATE": "UPDATE"}.get(verb)
    upper = [w.upper() for w in words]
    if marker in upper and upper.index(marker) + 1 < len(words):
        return f"{verb} {words[upper.index(marker) + 1].split('.')[-1]}"
    return verb


def _steps(target: str, msg_id: str) -> list[tuple[str, str, dict, int]]:
    """The two requests of one transaction: (name, path, JSON body, expected status)."""
    create = {
        "producer_group": "BenchGroup",
        "topic": "BenchTopic",
        "tags": "bench",
        "keys": msg_id,
        "msg_id": msg_id,
        "body": BODY,
    }
    end = {"producer_group": "BenchGroup", "action": "commit"}
    if target == "bare":
        return [
            ("insert", "/bare/insert", create, 201),
            ("commit", f"/bare/{msg_id}/commit", end, 200),
        ]
    return [
        ("prepare", "/api/v1/transactions", create, 201),
        ("commit", f"/api/v1/transactions/{msg_id}/end", end, 200),
    ]


def main() -> int:
    """Print the queries of one transaction and the CPU and wall time per transaction."""
    parser = argparse.ArgumentParser(description="SQL and CPU time of one transaction.")
    parser.add_argument("target", choices=["halfmoon", "bare"])
    parser.add_argument("--token", default="", help="a producer access key of BenchGroup")
    parser.add_argument("--repeat", type=int, default=100, help="transactions to time")
    parser.add_argument("--verbose", action="store_true", help="print every statement")
    args = parser.parse_args()

    if args.target == "bare":
        sys.path.insert(0, str(BENCH_DIR))
        os.environ["DJANGO_SETTINGS_MODULE"] = "bare.settings"
    else:
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    headers = {"HTTP_AUTHORIZATION": f"Bearer {args.token}"} if args.token else {}
    client = Client(**headers)
    prefix = f"q{uuid.uuid4().hex[:8]}-"

    def transaction(n: int, capture: bool = False) -> int:
        statements = 0
        for name, path, payload, expected in _steps(args.target, f"{prefix}{n}"):
            with CaptureQueriesContext(connection) if capture else nullcontext() as captured:
                response = client.post(path, json.dumps(payload), content_type="application/json")
            if response.status_code != expected:
                raise SystemExit(f"{name}: {response.status_code} {response.content[:300]!r}")
            if capture:
                queries = [q["sql"] for q in captured.captured_queries]
                statements += len(queries)
                shape = ", ".join(_summary(sql) for sql in queries)
                print(f"queries {name}: {len(queries)} [{shape}]")
                if args.verbose:
                    for sql in queries:
                        print(f"    {sql[:300]}")
        return statements

    print(f"queries per transaction: {transaction(0, capture=True)}")
    for n in range(1, 11):  # warm caches and the pool
        transaction(n)
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(11, 11 + args.repeat):
        transaction(n)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"in-process, one thread: CPU {1000 * cpu / args.repeat:.2f} ms per transaction, "
        f"wall {1000 * wall / args.repeat:.2f} ms ({args.repeat} transactions)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

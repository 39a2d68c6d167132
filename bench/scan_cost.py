"""What one back-check scan costs with 1,000 pending transactions over a long history.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_scan_bench \\
        .venv/bin/python bench/scan_cost.py [--passes 5] [--warmup 1] [--explain] [--reuse]

Per history size (``--small`` 100,000 and ``--large`` 1,000,000 resolved transactions) it
recreates ``<name>_<size>``, migrates and seeds it (``history_seed``: ``--pending`` PREPARED
transactions due for a check), then in a Django process per database times what one beat
tick runs, ``tasks.checks.check_half_queue(q)`` for every half queue, against a local producer
answering UNKNOW, and a bare httpx loop sending the same signed checks. The last line::

    scan_s_100k=<s> scan_s_1m=<s> ratio=<1m / 100k> check_rate_ratio=<scan / bare checks/s>

Targets: ratio < 1.5 (goal <= 1.2), check_rate_ratio >= 0.7. Steps, goals, figures:
bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from history_seed import CHECK_GROUP, GROUP, OP_HALF_TOPIC, history_seed, size_label
from throughput import (
    CHILDREN,
    LOG_DIR,
    ROOT,
    Pg,
    _exit_on_signal,
    _signal_group,
    _wait_group,
    base_env,
    cpu_seconds,
    pick_port,
    run,
    wait_http,
)

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_scan_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"


# --- The producer answering back-checks -----------------------------------------------------

_UNKNOW = b'{"state":"UNKNOW"}'
_received = {"checks": 0}


async def check_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app of the bench's producer (served by uvicorn in its own process): every POST is a
    back-check and is answered ``{"state":"UNKNOW"}`` at once (no signature check, so the
    producer side costs as little as possible); ``GET /count`` answers how many it received."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    if scope["method"] == "POST":
        _received["checks"] += 1
        body = _UNKNOW
    else:
        body = json.dumps(_received).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def check_url(port: int) -> str:
    """The producer group's check_url."""
    return f"http://127.0.0.1:{port}/check"


def checks_received(port: int) -> int:
    """How many back-checks the producer on ``port`` has answered so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=5) as response:
        return int(json.load(response)["checks"])


def start_check_server(port: int) -> None:
    """Serve ``check_app`` with uvicorn (httptools, uvloop, one process) and wait for it."""
    log = LOG_DIR / "scan-check-server.log"
    log.write_text("")
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "scan_cost:check_app",
        "--app-dir",
        str(BENCH_DIR),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--lifespan",
        "off",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    proc = CHILDREN.start(cmd, log=log)
    wait_http(port, "/count", proc, log)


# --- The timed scan (a Django process per database) ---------------------------------------------

PHASES = [
    ("claim", "broker.services.checks.scan", "check_claim"),
    ("rate limit", "broker.services.checks.claim", "check_rate_limit"),
    ("send", "broker.services.checks.scan", "checks_send"),
    ("apply", "broker.services.checks.scan", "check_outcomes_apply"),
    ("op flush", "broker.services.checks.scan", "op_flush"),
    ("checkpoint", "broker.services.checks.scan", "checkpoint_advance"),
    ("lease", "broker.services.checks.scan", "lease_acquire"),
    ("lease", "broker.services.checks.scan", "lease_release"),
]


class Meter:
    """Time spent in each step of the scan and in each kind of SQL statement.

    Wraps the step functions (module attributes, looked up at call time by their callers) and
    the database connection's ``execute`` (``connection.execute_wrapper``): nothing in broker/
    or tasks/ changes. Statements are grouped by innermost step, verb, table and shape. Only
    the thread that runs the scan is measured (the lease heartbeat thread has its own database
    connection and runs beside it, off the scan's path).
    """

    def __init__(self) -> None:
        self.thread = threading.get_ident()  # only the scan's own thread is measured
        self.stack: list[str] = []
        self.phase_s: dict[str, float] = {}
        self.sql: dict[str, list[float]] = {}
        self.samples: dict[str, tuple[str, Any]] = {}

    def reset(self) -> None:
        self.phase_s, self.sql = {}, {}

    def install(self) -> None:
        import importlib

        for phase, module_name, attr in PHASES:
            module = importlib.import_module(module_name)
            setattr(module, attr, self._wrap(phase, getattr(module, attr)))

    def _wrap(self, phase: str, func: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.thread:  # e.g. the scan's lease heartbeat thread
                return func(*args, **kwargs)
            self.stack.append(phase)
            t = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self.phase_s[phase] = self.phase_s.get(phase, 0.0) + time.perf_counter() - t
                self.stack.pop()

        return timed

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            key = f"{self.stack[-1] if self.stack else 'other'}: {statement_kind(sql)}"
            entry = self.sql.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - t
            self.samples.setdefault(key, (sql, params))


def statement_kind(sql: str) -> str:
    """A short name for a statement: verb, table and what makes it distinctive."""
    head = sql.lstrip().split(None, 1)[0].upper()
    if head == "WITH":
        head = "WITH..INSERT" if "INSERT" in sql.upper() else "WITH"
    match = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', sql, re.IGNORECASE)
    table = match.group(1).removeprefix("broker_") if match else "?"
    marks = [
        name
        for name, needle in (
            ("row_number", "ROW_NUMBER"),
            ("for update", "FOR UPDATE"),
            ("min", "MIN("),
            ("case", "CASE WHEN"),
            ("in-list", " IN ("),
            ("on conflict", "ON CONFLICT"),
            ("max_offset", "MAX_OFFSET"),
        )
        if needle in sql.upper()
    ]
    return " ".join([head, table, *marks])


class ScanWorker:
    """The Django side, in a process of its own per database: restores the pending
    transactions, runs and measures scan passes, reports. Driven by the parent over stdin."""

    def __init__(self, label: str, check_port: int, explain: bool) -> None:
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.db import connection

        from broker.conf import conf

        self.label, self.check_port, self.explain = label, check_port, explain
        self.meter = Meter()
        self.meter.install()
        self.half_queues = conf.half_queue_nums
        self.passes: list[dict[str, Any]] = []
        self.bare_s: list[float] = []
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE broker_producergroup SET check_url = %s WHERE name = %s",
                [check_url(check_port), GROUP],
            )
            cur.execute("UPDATE broker_scanlease SET owner = '', expires_timestamp = 0")
            cur.execute(
                "SELECT transaction_id, check_times, next_check_timestamp, last_check_timestamp"
                " FROM broker_transaction WHERE state = 'PREPARED'"
            )
            self.seeded = cur.fetchall()
            cur.execute("SELECT coalesce(max(id), 0) FROM broker_transactionevent")
            self.last_event = cur.fetchone()[0]
            cur.execute(
                "SELECT min(born_timestamp) FROM broker_transaction WHERE state = 'PREPARED'"
            )
            oldest = cur.fetchone()[0]
        self.pending = len(self.seeded)
        if (
            oldest is not None
            and time.time() * 1000 - oldest > conf.file_reserved_hours * 3_600_000 - 600_000
        ):
            print(f"{label}: WARNING the seed is nearly HALFMOON_FILE_RESERVED_HOURS old: reseed")

    def restore(self) -> None:
        """Put the pending transactions back as seeded (due, same check counts) and drop the
        check journal entries of earlier passes, so that every pass does the same work."""
        from django.db import connection, transaction

        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                "UPDATE broker_transaction t SET check_times = v.ct, next_check_timestamp = v.nc,"
                " last_check_timestamp = v.lc, undelivered_checks = 0"
                " FROM unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[])"
                " AS v(tid, ct, nc, lc) WHERE t.transaction_id = v.tid",
                [list(col) for col in zip(*self.seeded, strict=True)],
            )
            cur.execute("DELETE FROM broker_transactionevent WHERE id > %s", [self.last_event])
            cur.execute(
                "UPDATE broker_producergroup SET check_failures = 0, check_backoff_until = NULL,"
                " unreachable_since = NULL, last_check_error = ''"
            )
            cur.execute(
                "SELECT count(*) FROM broker_transaction WHERE state = 'PREPARED'"
                " AND next_check_timestamp <= %s",
                [time.time_ns() // 1_000_000],
            )
            due = cur.fetchone()[0]
        if due != self.pending:
            raise RuntimeError(f"{due} of {self.pending} pending transactions are due after reset")

    def one_pass(self) -> dict[str, Any]:
        """One scan pass, as the Celery tasks of one beat tick do it: ``check_half_queue(q)``
        for every half queue, in this process. Returns its figures."""
        from django.db import connection

        import tasks.checks

        self.restore()
        self.meter.reset()
        before = checks_received(self.check_port)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        totals: dict[str, int] = {}
        with connection.execute_wrapper(self.meter):
            cpu0, backend_cpu0 = time.process_time(), cpu_seconds(backend)
            t0 = time.perf_counter()
            for queue_id in range(self.half_queues):
                counts = tasks.checks.check_half_queue(queue_id)
                if counts is None:
                    raise RuntimeError(f"the lease of half queue {queue_id} was held")
                for key, value in counts.items():
                    totals[key] = totals.get(key, 0) + value
            elapsed = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            backend_cpu = cpu_seconds(backend) - backend_cpu0
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                if cur.fetchone()[0] != backend:  # the pool handed out another connection
                    backend_cpu = float("nan")
        return {
            "seconds": elapsed,
            "cpu_s": cpu,
            "backend_cpu_s": backend_cpu,
            "totals": totals,
            "received": checks_received(self.check_port) - before,
            "queries": sum(int(n) for n, _ in self.meter.sql.values()),
            "sql_s": sum(s for _, s in self.meter.sql.values()),
            "phases": dict(self.meter.phase_s),
            "statements": {k: list(v) for k, v in self.meter.sql.items()},
        }

    def bare_requests(self) -> list[tuple[bytes, str]]:
        """The signed check bodies of the pending transactions, as the scan POSTs them
        (``check_payload``, ``sign_check_body``), for ``bare_pass``."""
        if not hasattr(self, "_bare"):
            from halfmoon_client.signing import sign_check_body

            from broker.models import Message, ProducerGroup, Transaction
            from broker.services.checks import check_payload

            secret = ProducerGroup.objects.get(name=GROUP).check_secret
            txs = list(Transaction.objects.filter(state="PREPARED").order_by("pk"))
            halves = Message.objects.in_bulk([tx.half_commit_log_offset for tx in txs])
            self._bare = []
            for tx in txs:
                payload = check_payload(tx, halves[tx.half_commit_log_offset], tx.check_times + 1)
                body = json.dumps(payload, separators=(",", ":")).encode()
                self._bare.append((body, sign_check_body(secret, body)))
        return self._bare

    def bare_pass(self) -> float:
        """The baseline of the check rate: the same checks (one per pending transaction, the
        same signed bodies) POSTed to the same producer endpoint by a bare httpx loop, at the
        scan's concurrency (``HALFMOON_CHECK_CONCURRENCY``) and request timeout, each answer
        read and parsed, and nothing else (no claim, no bookkeeping). Returns its seconds."""
        import asyncio

        import httpx
        from halfmoon_client.signing import SIGNATURE_HEADER

        from broker.conf import conf

        requests = self.bare_requests()
        url = check_url(self.check_port)

        async def loop() -> list[str]:
            limit = asyncio.Semaphore(conf.check_concurrency)
            async with httpx.AsyncClient(
                timeout=conf.check_request_timeout_ms / 1000,
                follow_redirects=False,
                trust_env=False,
            ) as client:

                async def one(body: bytes, signature: str) -> str:
                    async with limit:
                        response = await client.post(
                            url,
                            content=body,
                            headers={
                                "Content-Type": "application/json",
                                SIGNATURE_HEADER: signature,
                            },
                        )
                        return response.json()["state"]

                return list(await asyncio.gather(*(one(b, s) for b, s in requests)))

        before = checks_received(self.check_port)
        t0 = time.perf_counter()
        answers = asyncio.run(loop())
        elapsed = time.perf_counter() - t0
        received = checks_received(self.check_port) - before
        if received != len(requests) or set(answers) != {"UNKNOW"}:
            raise RuntimeError(f"bare loop: {received} of {len(requests)} checks answered")
        return elapsed

    def command(self, name: str) -> dict[str, Any]:
        """Run one command of the parent: warmup, pass, bare or report."""
        if name == "warmup":
            warm = self.one_pass()
            print(
                f"{self.label} warm-up: {warm['seconds']:.3f} s, "
                f"checks sent {warm['totals'].get('sent')}"
            )
            self.bare_pass()
            return {"seconds": warm["seconds"]}
        if name == "pass":
            result = self.one_pass()
            self.passes.append(result)
            t = result["totals"]
            print(
                f"{self.label} pass {len(self.passes)}: {result['seconds']:.3f} s; due "
                f"{t.get('due')}, checks sent {t.get('sent')} (producer received "
                f"{result['received']}, delivered {t.get('delivered')}, undelivered "
                f"{t.get('undelivered')}); {result['queries']} queries, {result['sql_s']:.3f} s "
                f"in SQL; CPU {result['cpu_s']:.3f} s in this process, "
                f"{result['backend_cpu_s']:.3f} s in its PostgreSQL backend"
            )
            if t.get("sent") != self.pending or result["received"] != self.pending:
                print(f"{self.label}: WARNING not all {self.pending} pending were checked")
            return {"seconds": result["seconds"]}
        if name == "bare":
            seconds = self.bare_pass()
            self.bare_s.append(seconds)
            print(
                f"{self.label} bare httpx loop {len(self.bare_s)}: {seconds:.3f} s for "
                f"{self.pending} checks, {self.pending / seconds:.0f} checks/s"
            )
            return {"seconds": seconds}
        if name == "report":
            return self.report()
        raise ValueError(f"unknown command {name!r}")

    def report(self) -> dict[str, Any]:
        """Print where the median pass spent its time (and EXPLAINs); return the summary."""
        from django.conf import settings
        from django.db import connection

        self.restore()
        ordered = sorted(self.passes, key=lambda r: r["seconds"])
        median = ordered[(len(ordered) - 1) // 2]
        print(f"{self.label} median pass ({median['seconds']:.3f} s) by step (inclusive):")
        for phase, seconds in sorted(median["phases"].items(), key=lambda kv: -kv[1]):
            print(f"  {seconds:7.3f} s  {phase}")
        print(f"{self.label} median pass by statement (count, total, mean):")
        statements = sorted(median["statements"].items(), key=lambda kv: -kv[1][1])
        for key, (count, seconds) in statements:
            print(f"  {int(count):6d} {seconds:7.3f} s {1000 * seconds / count:7.3f} ms  {key}")
        if self.explain:
            explain(self.meter, self.label)
        with connection.cursor() as cur:
            cur.execute(
                'SELECT topic, queue_id, "offset" FROM broker_consumeroffset'
                " WHERE consumer_group = %s ORDER BY topic, queue_id",
                [CHECK_GROUP],
            )
            ckpts = ", ".join(
                f"{'op' if t == OP_HALF_TOPIC else 'half'}#{q}@{o}" for t, q, o in cur.fetchall()
            )
        print(f"{self.label} checkpoints of {CHECK_GROUP} after the passes: {ckpts}")
        names = (
            "HALFMOON_CHECK_BATCH_SIZE",
            "HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT",
            "HALFMOON_CHECK_GROUP_MAX_PER_SECOND",
            "HALFMOON_CHECK_CONCURRENCY",
        )
        return {
            "pending": self.pending,
            "median_s": statistics.median(r["seconds"] for r in self.passes),
            "median_cpu_s": statistics.median(r["cpu_s"] + r["backend_cpu_s"] for r in self.passes),
            "passes_s": [r["seconds"] for r in self.passes],
            "scan_checks_per_s": statistics.median(
                r["totals"].get("sent", 0) / r["seconds"] for r in self.passes
            ),
            "bare_s": self.bare_s,
            "bare_checks_per_s": statistics.median(self.pending / s for s in self.bare_s),
            "queries": median["queries"],
            "sql_s": median["sql_s"],
            "sent": median["totals"].get("sent", 0),
            "settings": {k: settings.HALFMOON_SETTINGS[k] for k in names},
        }


def worker_main(args: argparse.Namespace) -> int:
    """Serve the parent's commands (one per stdin line) on the database of DATABASE_URL: print
    the figures, then ``DONE {json}`` after each command."""
    worker = ScanWorker(args.worker, args.check_port, args.explain)
    print("DONE " + json.dumps({"pending": worker.pending}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name == "quit":
            break
        result = worker.command(name)
        print("DONE " + json.dumps(result), flush=True)
    return 0


# Statement kinds (prefixes of Meter keys) worth an EXPLAIN: the claim, the halves it reads,
# the checkpoint's bounds and Op read, the Op flush's read of the journal, the per-check writes.
EXPLAINED = (
    "claim: SELECT transaction row_number",
    "claim: SELECT transaction for update",
    "claim: SELECT message",
    "claim: UPDATE transaction case",
    "checkpoint: SELECT transaction min",
    "checkpoint: SELECT resolution min",
    "checkpoint: SELECT message",
    "op flush: SELECT resolution for update",
    "apply: UPDATE transaction",
    "apply: SELECT transaction",
    "apply: INSERT transactionevent",
    "apply: UPDATE producergroup",
)


def explain(meter: Meter, label: str) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) the history-sensitive statements of the last pass, with the
    parameters they ran with, in a transaction rolled back (the pending rows are due again)."""
    from django.db import connection, transaction

    for prefix in EXPLAINED:
        key = next((k for k in meter.samples if k.startswith(prefix)), None)
        if key is None:
            continue
        sql, params = meter.samples[key]
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
            plan = [row[0] for row in cur.fetchall()]
            transaction.set_rollback(True)
        print(f"{label} EXPLAIN {key}:")
        for line in plan:
            print(f"    {line[:300]}{'...' if len(line) > 300 else ''}")


class WorkerProcess:
    """A ``--worker`` child (own process group) on one database, driven line by line."""

    def __init__(self, pg: Pg, dbname: str, label: str, args: argparse.Namespace, port: int):
        env = base_env(pg.url_for(dbname), "halfmoon.settings")
        env.update(
            REDIS_URL=args.redis_url,
            CELERY_BROKER_URL=args.redis_url,
            HALFMOON_CHECK_BATCH_SIZE=str(args.batch_size),
            HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT=str(max(args.batch_size, args.pending)),
            HALFMOON_CHECK_GROUP_MAX_PER_SECOND="1000000",
            HALFMOON_HALF_QUEUE_NUMS=str(args.half_queues),
        )
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", label]
        cmd += ["--check-port", str(port), *(["--explain"] if args.explain else [])]
        self.label, self.log = label, LOG_DIR / f"scan-worker-{label}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        WORKERS.append(self.proc)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("DONE "):
                return json.loads(line[5:])
            print(line, end="", flush=True)
        tail = self.log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"the {self.label} worker exited; {self.log}:\n{tail}")

    def command(self, name: str) -> dict[str, Any]:
        """Send ``name``; print the worker's lines until it is done; return its result."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._read()


WORKERS: list[subprocess.Popen] = []


def workers_stop() -> None:
    """SIGTERM, then SIGKILL, the process group of every worker still running."""
    while WORKERS:
        proc = WORKERS.pop()
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if not _signal_group(proc, sig) or _wait_group(proc, wait):
                break


atexit.register(workers_stop)


def main(argv: list[str] | None = None) -> int:
    """Seed both databases, time the scans (passes interleaved), print the summary line last."""
    parser = argparse.ArgumentParser(
        description="Cost of one back-check scan pass (1,000 pending transactions) over a "
        "history of 100,000 and of 1,000,000 resolved ones. DATABASE_URL names the server and "
        "the base name of the databases (<name>_100k, <name>_1m: DROPPED and recreated).",
        epilog="Last line: scan_s_100k=<s> scan_s_1m=<s> ratio=<1m / 100k> "
        "check_rate_ratio=<scan checks/s / bare httpx checks/s> (targets: ratio < 1.5, goal "
        "<= 1.2; check_rate_ratio >= 0.7). See bench/README.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--small", type=int, default=100_000, help="resolved transactions, small history"
    )
    parser.add_argument(
        "--large", type=int, default=1_000_000, help="resolved transactions, large history"
    )
    parser.add_argument("--pending", type=int, default=1000, help="PREPARED transactions, due")
    parser.add_argument("--passes", type=int, default=5, help="timed passes per size (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes first, per size")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=1000,
        help="HALFMOON_CHECK_BATCH_SIZE of the scan (1000: one round per half queue; the "
        "broker's default, 200, takes two); HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT follows it",
    )
    parser.add_argument("--half-queues", type=int, default=4, help="HALFMOON_HALF_QUEUE_NUMS")
    parser.add_argument(
        "--reuse", action="store_true", help="time the databases of an earlier run, no reseed"
    )
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN ANALYZE the claim and checkpoint queries"
    )
    parser.add_argument(
        "--check-port", type=int, help="producer port (default: the first free one in 18200-18249)"
    )
    parser.add_argument(
        "--redis-url",
        default=DEFAULT_REDIS_URL,
        help="Redis of the scan (rate limit, console feed)",
    )
    parser.add_argument("--worker", metavar="LABEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if min(args.small, args.pending, args.passes) < 1 or args.large < args.small:
        parser.error("sizes and --passes must be >= 1, --large >= --small")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    # Ctrl-C stops everything even when started from a shell that ignores SIGINT (cmd &).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    sizes = [(size_label(args.small), args.small), (size_label(args.large), args.large)]
    port = pick_port(args.check_port)
    print(
        f"bench: {args.pending} pending transactions over {args.small} and {args.large} resolved "
        f"ones, {args.half_queues} half queues, {args.warmup} warm-up + {args.passes} timed "
        f"passes per size (interleaved), HALFMOON_CHECK_BATCH_SIZE={args.batch_size}, producer "
        f"on port {port}, {os.cpu_count()} CPUs, PostgreSQL {pg.host}:{pg.port}/{pg.dbname}_*",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    try:
        start_check_server(port)
        if not args.reuse:
            for label, history in sizes:
                dbname = f"{pg.dbname}_{label}"
                pg.recreate(dbname)
                env = base_env(pg.url_for(dbname), "halfmoon.settings")
                t0 = time.monotonic()
                manage = [sys.executable, str(ROOT / "manage.py")]
                run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
                print(f"{dbname}: recreated, migrated in {time.monotonic() - t0:.1f} s", flush=True)
                history_seed(
                    pg,
                    dbname,
                    history=history,
                    pending=args.pending,
                    half_queues=args.half_queues,
                    check_url=check_url(port),
                )
        workers = {
            label: WorkerProcess(pg, f"{pg.dbname}_{label}", label, args, port)
            for label, _ in sizes
        }
        for _ in range(args.warmup):
            for worker in workers.values():
                worker.command("warmup")
        for i in range(args.passes):
            # Alternate which size goes first, so neither always follows the other.
            for worker in list(workers.values())[:: 1 if i % 2 == 0 else -1]:
                worker.command("pass")
                worker.command("bare")  # the baseline of the check rate, right after
        for label, worker in workers.items():
            results[label] = worker.command("report")
    finally:
        workers_stop()
        CHILDREN.stop_all()
    small, large = (results[label]["median_s"] for label, _ in sizes)
    ratio = large / small if small else 0.0
    for label, history in sizes:
        r = results[label]
        print(
            f"{label}: history {history}, median {r['median_s']:.3f} s of "
            f"{', '.join(f'{s:.3f}' for s in r['passes_s'])}; {r['sent']} checks, "
            f"{r['queries']} queries ({r['sql_s']:.3f} s in SQL) per pass; "
            f"{1000 * r['median_s'] / max(1, r['sent']):.1f} ms per check; CPU (scan process + "
            f"its PostgreSQL backend) median {r['median_cpu_s']:.3f} s"
        )
    small_cpu, large_cpu = (results[label]["median_cpu_s"] for label, _ in sizes)
    print(
        f"CPU ratio {sizes[1][0]} / {sizes[0][0]}: "
        f"{large_cpu / small_cpu if small_cpu else 0.0:.3f} (less sensitive to other load than "
        f"wall time)"
    )
    rate_ratios = {}
    for label, _ in sizes:
        r = results[label]
        rate_ratios[label] = r["scan_checks_per_s"] / r["bare_checks_per_s"]
        print(
            f"{label}: scan {r['scan_checks_per_s']:.0f} checks/s (median pass), bare httpx loop "
            f"{r['bare_checks_per_s']:.0f} checks/s (median of "
            f"{', '.join(f'{s:.3f}' for s in r['bare_s'])} s): {rate_ratios[label]:.3f}"
        )
    rate_ratio = min(rate_ratios.values())
    print(f"target ratio < 1.5: {'met' if ratio < 1.5 else 'MISSED'} ({ratio:.3f})")
    print(f"goal history ratio <= 1.2: {'met' if ratio <= 1.2 else 'MISSED'} ({ratio:.3f})")
    print(
        f"goal check_rate_ratio >= 0.7 (scan checks/s / bare checks/s, the lower of the two "
        f"sizes): {'met' if rate_ratio >= 0.7 else 'MISSED'} ({rate_ratio:.3f})"
    )
    print(
        f"scan_s_100k={small:.3f} scan_s_1m={large:.3f} ratio={ratio:.3f} "
        f"check_rate_ratio={rate_ratio:.3f}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)

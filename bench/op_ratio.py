"""Op messages per resolution under a sustained load of concurrent commits (RIP-50 batching).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_op_bench \\
        .venv/bin/python bench/op_ratio.py [--duration 30] [--connections 32]

1. Recreates the database, migrates it, creates topic ``BenchTopic`` (4 queues), producer group
   ``BenchGroup`` and an access key (as bench/throughput.py does).
2. Starts the broker as the quick start serves it (deploy/supervisord.conf): 2 web processes
   (``python -m halfmoon.web``), ``celery -A tasks worker --concurrency 2`` and ``celery -A tasks beat``, each in
   its own process group, on Redis DB 13 (flushed first), with the default Op settings
   (``HALFMOON_OP_BATCH_INTERVAL_MS`` 3000, ``HALFMOON_OP_MSG_MAX_SIZE`` 4096) unless
   ``--op-interval-ms`` / ``--op-max-size`` are given.
3. Drives ``wrk -s bench/tx.lua`` (half message + commit per transaction, one connection per
   producer) for ``--duration`` seconds, then waits until every ``Resolution`` row has its
   ``op_commit_log_offset`` (the Op journal is flushed), and stops every process.
4. Counts resolutions and Op messages (on ``RMQ_SYS_TRANS_OP_HALF_TOPIC``), checks that every
   resolved half offset is named by exactly one Op message (and by the one its journal row
   points at, with gap-free Op queue offsets), and prints throughput, per-queue figures, how long
   resolutions waited for their Op message and which flush wrote how many Op messages.

The last line is::

    resolutions=<n> op_messages=<n> op_per_resolution=<r>

The target is op_per_resolution < 0.1. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis
from throughput import (
    CHILDREN,
    LOG_DIR,
    TOPIC,
    Pg,
    _exit_on_signal,
    base_env,
    broker_database_prepare,
    pick_port,
    run_wrk,
    start_web,
    wait_http,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_op_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TARGET = 0.1


def wait_log(path: Path, needle: str, proc: Any, timeout: float = 90.0) -> None:
    """Wait until ``needle`` appears in the log ``path`` of ``proc``.

    Raises:
        RuntimeError: the process exited or the line did not appear in time (with the log tail).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = path.read_text(errors="replace")[-3000:] if path.exists() else ""
    raise RuntimeError(f"{path.name}: no {needle!r}; last lines:\n{tail}")


def start_celery(env: dict[str, str]) -> None:
    """Start the Celery worker and beat of the quick start (deploy/supervisord.conf) and wait until both are up."""
    worker_log, beat_log = LOG_DIR / "op-ratio-worker.log", LOG_DIR / "op-ratio-beat.log"
    for log in (worker_log, beat_log):
        log.write_text("")
    celery = [sys.executable, "-m", "celery", "-A", "tasks"]
    worker = CHILDREN.start(
        [*celery, "worker", "--loglevel", "info", "--concurrency", "2"], env=env, log=worker_log
    )
    beat = CHILDREN.start(
        [
            *celery,
            "beat",
            "--loglevel",
            "info",
            "--pidfile=",  # no celerybeat.pid in the working directory
            "-s",
            str(LOG_DIR / "op-ratio-beat-schedule"),
        ],
        env=env,
        log=beat_log,
    )
    wait_log(worker_log, " ready.", worker)
    wait_log(beat_log, "beat: Starting", beat)


def journal_state(pg: Pg) -> tuple[int, int]:
    """(resolutions, of which not yet named by an Op message)."""
    with pg.connect(pg.dbname) as conn:
        return conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE op_commit_log_offset IS NULL)"
            " FROM broker_resolution"
        ).fetchone()


def wait_flushed(pg: Pg, timeout: float) -> float:
    """Wait until every resolution is in an Op message; return how long it took.

    Raises:
        RuntimeError: still unflushed after ``timeout`` seconds.
    """
    t0 = time.monotonic()
    while True:
        total, unflushed = journal_state(pg)
        if not unflushed:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{unflushed} of {total} resolutions unflushed after {timeout} s")
        time.sleep(0.25)


def percentile(values: list[int], q: float) -> int:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def flush_tasks(worker_log: Path) -> dict[str, tuple[int, int]]:
    """From the Celery worker's log: {task name: (runs, sum of results)} of the Op flush tasks
    (their result is the number of Op messages they wrote) and runs of the scan task."""
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    pattern = re.compile(r"Task (tasks\.[\w.]+)\[[^\]]+\] succeeded in [\d.e-]+s: (\S+)")
    for match in pattern.finditer(worker_log.read_text(errors="replace")):
        entry = found[match.group(1)]
        entry[0] += 1
        if match.group(2).isdigit():
            entry[1] += int(match.group(2))
    return {name: (runs, total) for name, (runs, total) in found.items()}


def analyse(pg: Pg, worker_log: Path) -> tuple[int, int, bool]:
    """Print the per-queue figures and the verification; return (resolutions, Op messages, ok)."""
    with pg.connect(pg.dbname) as conn:
        resolutions = conn.execute(
            "SELECT half_queue_id, half_queue_offset, op_commit_log_offset, resolved_timestamp"
            " FROM broker_resolution"
        ).fetchall()
        ops = conn.execute(
            "SELECT commit_log_offset, queue_id, queue_offset, body, store_timestamp, tags"
            " FROM broker_message WHERE topic = %s ORDER BY queue_id, queue_offset",
            [OP_HALF_TOPIC],
        ).fetchall()
        op_queue_max = dict(
            conn.execute(
                "SELECT queue_id, max_offset FROM broker_consumequeue WHERE topic = %s",
                [OP_HALF_TOPIC],
            ).fetchall()
        )
        states = dict(
            conn.execute(
                "SELECT state, count(*) FROM broker_transaction WHERE topic = %s GROUP BY state",
                [TOPIC],
            ).fetchall()
        )
    named: Counter = Counter()
    op_of: dict[tuple[int, int], int] = {}
    op_at: dict[int, int] = {}
    per_queue: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"resolutions": 0, "ops": 0, "offsets": 0, "bytes": [], "offsets_per_op": []}
    )
    problems: list[str] = []
    for clo, queue_id, queue_offset, body, stored, tags in ops:
        offsets = [int(p) for p in bytes(body).decode("ascii").split(",") if p]
        q = per_queue[queue_id]
        q["ops"] += 1
        q["offsets"] += len(offsets)
        q["bytes"].append(len(body))
        q["offsets_per_op"].append(len(offsets))
        q.setdefault("queue_offsets", []).append(queue_offset)
        op_at[clo] = stored
        if tags != "d":
            problems.append(f"Op message {clo} has tag {tags!r}")
        for offset in offsets:
            named[(queue_id, offset)] += 1
            op_of[(queue_id, offset)] = clo
    for queue_id, q in per_queue.items():
        if q["queue_offsets"] != list(range(q["ops"])) or op_queue_max.get(queue_id) != q["ops"]:
            problems.append(f"Op queue {queue_id}: offsets not gap-free from 0 or counter differs")
    if ops and resolutions:
        window_ms = max(o[4] for o in ops) - min(r[3] for r in resolutions)
    else:
        window_ms = 0
    waits: list[int] = []
    resolved_keys = set()
    for queue_id, offset, op_clo, resolved_ts in resolutions:
        key = (queue_id, offset)
        resolved_keys.add(key)
        per_queue[queue_id]["resolutions"] += 1
        if named[key] != 1:
            problems.append(f"half offset {queue_id}#{offset} named by {named[key]} Op messages")
        elif op_of[key] != op_clo:
            problems.append(f"half offset {queue_id}#{offset}: journal points at another Op")
        if op_clo in op_at:
            waits.append(op_at[op_clo] - resolved_ts)
    extra = [key for key in named if key not in resolved_keys]
    if extra:
        problems.append(f"{len(extra)} offsets named by Op messages but never resolved")
    total_ops = len(ops)
    print("per half queue: resolutions, Op messages, Op per resolution, offsets per Op (mean/max),")
    print("                Op body bytes (mean/max)")
    for queue_id in sorted(per_queue):
        q = per_queue[queue_id]
        n_res, n_ops = q["resolutions"], q["ops"]
        print(
            f"  queue {queue_id}: {n_res:7d} {n_ops:6d} {n_ops / n_res if n_res else 0:8.4f} "
            f"{q['offsets'] / n_ops if n_ops else 0:8.1f} / {max(q['offsets_per_op'], default=0):4d}"
            f" {sum(q['bytes']) / n_ops if n_ops else 0:8.0f} / {max(q['bytes'], default=0):5d}"
        )
    print(
        f"resolution -> its Op message written: p50 {percentile(waits, 0.5)} ms, "
        f"p90 {percentile(waits, 0.9)} ms, p99 {percentile(waits, 0.99)} ms, "
        f"max {max(waits, default=0)} ms"
    )
    tasks = flush_tasks(worker_log)
    by_beat = tasks.get("tasks.op_messages.op_flush_all", (0, 0))
    by_size = tasks.get("tasks.op_messages.op_flush_queue", (0, 0))
    scans = tasks.get("tasks.checks.check_half_queue", (0, 0))[0]
    print(
        f"Op messages by writer (Celery worker log): beat's op_flush_all {by_beat[1]} in "
        f"{by_beat[0]} runs, size-triggered op_flush_queue {by_size[1]} in {by_size[0]} runs, "
        f"the rest ({total_ops - by_beat[1] - by_size[1]}) by the flush at the end of "
        f"{scans} check_half_queue scans"
    )
    if window_ms > 0:
        op_rate = 1000 * total_ops / window_ms
        print(
            f"Op messages per second from the first resolution to the last Op message "
            f"({window_ms / 1000:.1f} s): {op_rate:.2f}/s, resolutions {1000 * len(resolutions) / window_ms:.1f}/s; "
            f"at this Op rate op_per_resolution < {TARGET} needs more than "
            f"{op_rate / TARGET:.0f} resolutions/s"
        )
    print(f"transactions on {TOPIC} by state: {dict(sorted(states.items()))}")
    ok = not problems
    print(
        f"verify: {len(resolutions)} resolved half offsets, each named by exactly one Op message "
        f"(the one its journal row points at), Op queue offsets gap-free: "
        f"{'OK' if ok else 'FAILED'}"
    )
    for problem in problems[:20]:
        print(f"  {problem}")
    return len(resolutions), total_ops, ok


def main(argv: list[str] | None = None) -> int:
    """Serve the broker, load it, wait for the Op journal to drain, count; summary line last."""
    parser = argparse.ArgumentParser(
        description="Op messages written per resolution under a sustained commit load (RIP-50). "
        "DATABASE_URL names the server and the database (DROPPED and recreated; default "
        "halfmoon_op_bench).",
        epilog="Last line: resolutions=<n> op_messages=<n> op_per_resolution=<r> (target < 0.1). "
        "See bench/README.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=30, help="seconds of load")
    parser.add_argument("--connections", type=int, default=32, help="concurrent producers")
    parser.add_argument(
        "--op-interval-ms",
        type=int,
        help="HALFMOON_OP_BATCH_INTERVAL_MS (default: the broker's, 3000)",
    )
    parser.add_argument(
        "--op-max-size", type=int, help="HALFMOON_OP_MSG_MAX_SIZE (default: the broker's, 4096)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="HALFMOON_X=N",
        help="any other broker setting for every process (e.g. HALFMOON_CHECK_SCAN_INTERVAL_MS=3000)",
    )
    parser.add_argument(
        "--flush-timeout",
        type=float,
        default=120,
        help="seconds to wait for the Op journal to drain",
    )
    parser.add_argument("--port", type=int, help="web port (default: free in 18200-18249)")
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="Redis of the broker (flushed first)"
    )
    args = parser.parse_args(argv)
    if args.duration < 1 or args.connections < 1:
        parser.error("--duration must be >= 1 s, --connections >= 1")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    # Ctrl-C stops everything even when started from a shell that ignores SIGINT (cmd &).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    env.update(REDIS_URL=args.redis_url, CELERY_BROKER_URL=args.redis_url)
    env["HALFMOON_LOG_LEVEL"] = "INFO"
    if args.op_interval_ms is not None:
        env["HALFMOON_OP_BATCH_INTERVAL_MS"] = str(args.op_interval_ms)
    if args.op_max_size is not None:
        env["HALFMOON_OP_MSG_MAX_SIZE"] = str(args.op_max_size)
    for item in args.set:
        name, _, value = item.partition("=")
        if not name.startswith("HALFMOON_") or not value:
            parser.error(f"--set takes HALFMOON_NAME=VALUE, not {item!r}")
        env[name] = value
    op_settings = {
        k: env.get(k, default)
        for k, default in (
            ("HALFMOON_OP_BATCH_INTERVAL_MS", "3000"),
            ("HALFMOON_OP_MSG_MAX_SIZE", "4096"),
            ("HALFMOON_CHECK_SCAN_INTERVAL_MS", "1000"),
            ("HALFMOON_HALF_QUEUE_NUMS", "4"),
        )
    }
    port = pick_port(args.port)
    print(
        f"bench: {args.connections} connections for {args.duration:g} s, 2 web processes, "
        f"celery worker --concurrency 2 + beat, {', '.join(f'{k}={v}' for k, v in op_settings.items())}, "
        f"{os.cpu_count()} CPUs, PostgreSQL {pg.host}:{pg.port}/{pg.dbname}, {args.redis_url}; "
        f"logs in {LOG_DIR}",
        flush=True,
    )
    redis.Redis.from_url(args.redis_url).flushdb()
    t0 = time.monotonic()
    token = broker_database_prepare(pg, env)
    print(f"{pg.dbname}: recreated and migrated in {time.monotonic() - t0:.1f} s", flush=True)
    wrk_log = LOG_DIR / "op-ratio-wrk.log"
    wrk_log.write_text("")
    try:
        web_log = LOG_DIR / "op-ratio-uvicorn.log"
        web = start_web(env, port, web_log)
        wait_http(port, "/healthz", web, web_log)
        start_celery(env)
        print("broker: web, worker and beat up", flush=True)
        result = run_wrk(port, "halfmoon", "o", token, args.duration, args.connections, wrk_log)
        print(result.describe("load"), flush=True)
        total, unflushed = journal_state(pg)
        print(
            f"load stopped: {total} resolutions, {unflushed} not yet in an Op message", flush=True
        )
        drained = wait_flushed(pg, args.flush_timeout)
        print(f"Op journal drained {drained:.1f} s after the load stopped", flush=True)
    finally:
        CHILDREN.stop_all()
    resolutions, op_messages, ok = analyse(pg, LOG_DIR / "op-ratio-worker.log")
    ratio = op_messages / resolutions if resolutions else 0.0
    print(
        f"throughput: {result.tx_per_s:.1f} tx/s committed by wrk; "
        f"{op_messages / result.duration_s:.2f} Op messages/s over the load"
    )
    print(f"target op_per_resolution < {TARGET}: {'met' if ratio < TARGET else 'MISSED'}")
    print(f"resolutions={resolutions} op_messages={op_messages} op_per_resolution={ratio:.4f}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)

"""Transactions per second through RocketMQ's official Python client (gRPC) against the same
transactions through the HTTP API, in one run against one broker.

    .venv/bin/python bench/grpc_throughput.py [--producers 4] [--threads 4] [--duration 15]

1. Creates a fresh database ``--database`` on the PostgreSQL server of ``DATABASE_URL``
   (default the machine's, as the e2e tests), migrates it, makes an admin access key with a
   SecretKey (``manage.py access_key_secret``), topics ``BenchGrpc`` and ``BenchHttp`` and the
   producer group ``BenchHttp``; flushes Redis DB 4 (``--redis-url``).
2. Serves the broker as ``bin/run`` does: ``--web-processes`` web processes (2, ``python -m
   halfmoon.web``) and ``--grpc-processes`` gRPC servers (1, ``python -m halfmoon.grpc``; more
   share one port, ``SO_REUSEPORT``); no Celery (every transaction is committed at once:
   nothing to back-check).
3. gRPC phase: ``--producers`` processes, each one official ``Producer`` (with a
   ``TransactionChecker``) shared by ``--threads`` threads, each thread looping
   ``begin_transaction()`` + ``send(message, transaction)`` + ``commit()`` (one transaction =
   one half message and its commit) with ``--body-bytes`` bodies.
4. HTTP phase, same processes and threads: ``POST /api/v1/transactions`` + ``POST
   /api/v1/transactions/{id}/end`` (commit), one ``httpx.Client`` (keep-alive) per thread.

Each phase counts the transactions committed in ``--duration`` seconds after ``--warmup``
uncounted ones, and the CPU time (user + system, psutil) over the same window of the server
processes serving it (the gRPC servers, or the web processes) and of the producer processes;
PostgreSQL's own is not counted.
After each phase SQL checks that every transaction acknowledged is COMMITTED and delivered
exactly once on its topic. Logs go to ``var/bench/grpc/``. The last line is::

    grpc_tx_per_s=<n> http_tx_per_s=<n> ratio=<grpc/http> server_cpu_ms_per_tx=<n>

``server_cpu_ms_per_tx``: the gRPC servers' CPU milliseconds per gRPC transaction. Goal: ratio
>= 1.5. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

LOG_DIR = ROOT / "var" / "bench" / "grpc"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/4"
GRPC_TOPIC, HTTP_TOPIC, HTTP_GROUP = "BenchGrpc", "BenchHttp", "BenchHttp"
ADMIN_KEY = "bench-admin"


# --- Worker processes (one per producer) --------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    """One producer process: start its client, print ``{"ready": true}``, read the start time
    (epoch seconds) on stdin, then run ``--threads`` loops until ``start + warmup + duration``;
    print ``{"count": n, "errors": e, "ids": [...]}`` (transactions committed inside the
    measured window, failures, and every transaction id acknowledged)."""
    body = b"x" * args.body_bytes
    lock = threading.Lock()
    result: dict[str, Any] = {"count": 0, "errors": 0, "ids": [], "error_samples": []}
    if args.worker == "grpc":
        from rocketmq import (
            ClientConfiguration,
            Credentials,
            Message,
            Producer,
            TransactionChecker,
            TransactionResolution,
        )

        class Checker(TransactionChecker):
            def check(self, message: Message) -> TransactionResolution:
                return TransactionResolution.COMMIT

        config = ClientConfiguration(args.endpoint, Credentials(ADMIN_KEY, args.secret))
        producer = Producer(config, (GRPC_TOPIC,), Checker())
        producer.startup()

        def one() -> str:
            message = Message()
            message.topic = GRPC_TOPIC
            message.body = body
            transaction = producer.begin_transaction()
            receipt = producer.send(message, transaction)
            transaction.commit()
            return receipt.message_id

    else:
        import httpx

        headers = {"Authorization": f"Bearer {args.token}"}
        local = threading.local()
        text = body.decode()

        def one() -> str:
            if not hasattr(local, "client"):
                local.client = httpx.Client(base_url=args.url, headers=headers, timeout=30)
            half = local.client.post(
                "/api/v1/transactions",
                json={"producer_group": HTTP_GROUP, "topic": HTTP_TOPIC, "body": text},
            )
            assert half.status_code == 201, half.text
            tx_id = half.json()["transaction_id"]
            end = local.client.post(
                f"/api/v1/transactions/{tx_id}/end",
                json={"producer_group": HTTP_GROUP, "action": "commit"},
            )
            assert end.status_code == 200, end.text
            return tx_id

    print(json.dumps({"ready": True}), flush=True)
    start = float(sys.stdin.readline())
    measure_from = start + args.warmup
    until = measure_from + args.duration

    def loop() -> None:
        while time.time() < start:
            time.sleep(0.001)
        while time.time() < until:
            try:
                tx_id = one()
            except Exception as exc:  # counted and reported: the bench must not hide failures
                with lock:
                    result["errors"] += 1
                    if len(result["error_samples"]) < 3:
                        result["error_samples"].append(f"{type(exc).__name__}: {exc}")
                continue
            done = time.time()
            with lock:
                result["ids"].append(tx_id)
                if measure_from <= done < until:
                    result["count"] += 1

    threads = [threading.Thread(target=loop) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if args.worker == "grpc":
        producer.shutdown()
    print(json.dumps(result), flush=True)
    return 0


# --- The run ------------------------------------------------------------------------------------


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` and their children so far."""
    import psutil

    total = 0.0
    for pid in pids:
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
    return total


def phase(
    kind: str, args: argparse.Namespace, extra: list[str], server_pids: list[int]
) -> tuple[float, float, list[str], int]:
    """Run one phase (``grpc`` or ``http``) with ``--producers`` worker processes; returns
    (transactions per second, server CPU ms per transaction, every id acknowledged, errors)."""
    home = LOG_DIR / f"{kind}-client-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable, __file__, "--worker", kind, "--threads", str(args.threads),
        "--warmup", str(args.warmup), "--duration", str(args.duration),
        "--body-bytes", str(args.body_bytes), *extra,
    ]  # fmt: skip
    procs = []
    for n in range(args.producers):
        err = (LOG_DIR / f"{kind}-worker-{n}.stderr").open("wb")
        procs.append(
            subprocess.Popen(
                command,
                env=env,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        )
    for proc in procs:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise SystemExit(f"a {kind} worker failed to start: see {LOG_DIR}/{kind}-worker-*")
    start = time.time() + 0.5
    for proc in procs:
        proc.stdin.write(f"{start}\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
    client_pids = [proc.pid for proc in procs]
    time.sleep(max(0.0, start + args.warmup - time.time()))
    cpu_before, client_before = cpu_s(server_pids), cpu_s(client_pids)
    time.sleep(max(0.0, start + args.warmup + args.duration - time.time()))
    cpu_after, client_after = cpu_s(server_pids), cpu_s(client_pids)
    count, errors, ids, samples = 0, 0, [], []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        result = json.loads(out.strip().splitlines()[-1])
        count += result["count"]
        errors += result["errors"]
        ids += result["ids"]
        samples += result["error_samples"]
    if samples:
        print(f"{kind}: {errors} failed transactions, e.g. {samples[:3]}", flush=True)
    tx_per_s = count / args.duration
    cpu_ms_per_tx = (cpu_after - cpu_before) * 1000 / count if count else float("nan")
    client_ms = (client_after - client_before) * 1000 / count if count else float("nan")
    print(f"{kind}: producer processes' CPU {client_ms:.2f} ms/tx", flush=True)
    return tx_per_s, cpu_ms_per_tx, ids, errors


def verify(database_url: str, topic: str, ids: list[str]) -> None:
    """Every id acknowledged is COMMITTED, and the topic holds exactly one message per
    committed transaction (SystemExit otherwise)."""
    import psycopg

    url = database_url.replace("postgres://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        committed = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'COMMITTED'"
            " AND transaction_id = ANY(%s)",
            (topic, ids),
        ).fetchone()[0]
        delivered = conn.execute(
            "SELECT count(*), count(DISTINCT msg_id) FROM broker_message WHERE topic = %s",
            (topic,),
        ).fetchone()
        all_committed = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'COMMITTED'",
            (topic,),
        ).fetchone()[0]
    if committed != len(set(ids)) or delivered != (all_committed, all_committed):
        raise SystemExit(
            f"{topic}: {len(set(ids))} acknowledged, {committed} of them COMMITTED; "
            f"{all_committed} committed in all, messages on the topic (rows, ids) {delivered}"
        )
    print(f"{topic}: {committed} acknowledged transactions COMMITTED, each delivered once")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--threads", type=int, default=4, help="in-flight loops per process")
    parser.add_argument("--duration", type=float, default=15, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=3, help="uncounted seconds first")
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--grpc-processes", type=int, default=1, help="1: as bin/run")
    parser.add_argument("--database", default="halfmoon_grpc_bench")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--worker", choices=("grpc", "http"), help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--secret", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    import httpx
    import redis

    from tests.e2e.processes import Stack, broker_env, free_port, manage, pg_database

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with redis.Redis.from_url(args.redis_url) as r:
        r.flushdb()
    with pg_database(args.database) as database_url:
        env = broker_env(
            database_url=database_url,
            redis_url=args.redis_url,
            var_dir=LOG_DIR / "var",
            settings={"HALFMOON_LOG_LEVEL": "WARNING"},
        )
        manage(env, "migrate", "--noinput", "-v", "0")
        token = manage(env, "create_access_key", ADMIN_KEY, "--admin").strip().splitlines()[-1]
        secret = manage(env, "access_key_secret", ADMIN_KEY).strip().splitlines()[-1]
        stack = Stack(env, LOG_DIR)
        try:
            url = stack.start_web(free_port(), args.web_processes)
            grpc_port = free_port()
            for n in range(args.grpc_processes):
                stack.start_grpc(grpc_port, name="grpc" if n == 0 else f"grpc{n + 1}")
            headers = {"Authorization": f"Bearer {token}"}
            for topic in (GRPC_TOPIC, HTTP_TOPIC):
                answer = httpx.post(f"{url}/api/v1/topics", json={"name": topic}, headers=headers)
                assert answer.status_code == 201, answer.text
            answer = httpx.post(
                f"{url}/api/v1/producer-groups", json={"name": HTTP_GROUP}, headers=headers
            )
            assert answer.status_code == 201, answer.text
            pids = {name: proc.pid for name, proc in stack.procs.items()}
            grpc_pids = [pid for name, pid in pids.items() if name.startswith("grpc")]
            web_pids = [pid for name, pid in pids.items() if name.startswith("web")]
            print(
                f"{args.producers} producer processes x {args.threads} threads, "
                f"{args.body_bytes}-byte bodies, {args.warmup:g} s warmup + {args.duration:g} s;"
                f" {args.web_processes} web, {args.grpc_processes} gRPC server processes",
                flush=True,
            )
            grpc_tx, grpc_cpu, grpc_ids, grpc_errors = phase(
                "grpc", args, ["--endpoint", stack.grpc_endpoint, "--secret", secret], grpc_pids
            )
            stack.check_alive()
            verify(database_url, GRPC_TOPIC, grpc_ids)
            print(
                f"grpc: {grpc_tx:.1f} tx/s, server CPU {grpc_cpu:.2f} ms/tx, {grpc_errors} failed",
                flush=True,
            )
            http_tx, http_cpu, http_ids, http_errors = phase(
                "http", args, ["--url", url, "--token", token], web_pids
            )
            stack.check_alive()
            verify(database_url, HTTP_TOPIC, http_ids)
            print(
                f"http: {http_tx:.1f} tx/s, server CPU {http_cpu:.2f} ms/tx, {http_errors} failed",
                flush=True,
            )
        except BaseException:
            print(stack.report(), file=sys.stderr)
            raise
        finally:
            stack.stop()
    ratio = grpc_tx / http_tx if http_tx else float("nan")
    print(
        f"grpc_tx_per_s={grpc_tx:.1f} http_tx_per_s={http_tx:.1f} ratio={ratio:.2f} "
        f"server_cpu_ms_per_tx={grpc_cpu:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

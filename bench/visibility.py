"""Visibility latency: how soon a long-polling consumer receives a committed transactional message
(wake-ups on commit, broker/plumbing/wakeups.py), and what hundreds of waiting receives cost.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_visibility_bench \\
        .venv/bin/python bench/visibility.py [--commits 2000] [--waiters 500]

1. Recreates the database, migrates it, creates topics ``BenchTopic`` (background load),
   ``VisTopic`` (measured) and ``IdleTopic`` (nothing is ever sent there), consumer groups
   ``VisConsumers`` and ``IdleConsumers`` and an admin access key.
2. Serves the broker as the quick start does (2 web processes, ``python -m halfmoon.web``,
   PostgreSQL, Redis DB 10 flushed first). No Celery: nothing here needs a back-check.
3. Calibration: what this machine sustains through the broker. ``--calibrate-producers``
   producers send transactions (half message + commit) on BenchTopic back to back for
   ``--calibrate-s`` seconds (after 2 s uncounted): ``capacity_tx_per_s``. The background load
   below is ``--load-fraction`` of it (25%), so it takes the same share of a slow machine as of
   a fast one (``--load-tps`` sets it in transactions/s instead).
4. Latency: a background load of that many transactions/s (half message + commit) on
   BenchTopic; ``--consumers`` consumers long-poll VisTopic (``wait_ms`` 20000, acking what they
   get); one producer commits ``--commits`` transactions on VisTopic, one after the other at
   most ``--rate`` per second. Latency of one message: from the commit's 200 answer reaching the
   producer to the receive answer carrying it reaching its consumer (both in this process, one
   monotonic clock; negative when the consumer had it before the producer had its answer).
5. Waiters: ``--waiters`` receives long-poll IdleTopic (``wait_ms`` ``--waiter-wait-ms``), all
   at once (or sent evenly over ``--waiter-ramp-s``), from clients of ``WAITERS_PER_CLIENT``
   connections each, while the background load goes on; 2 s after the last is sent, /healthz
   is sampled every 20 ms until half of them have answered, and the web processes' thread
   counts are read. Every waiter must answer 200 with no message, not before its wait_ms and
   not more than 1 s past it.

Baseline: the broker has no switch to turn wake-ups off. Before them a waiting receive re-read
the database every 100 ms (the old ``polling.POLL_SLEEP_S``: ten reads a second per waiter), so a
commit landed uniformly inside that interval: p50 50 ms, p99 99 ms from the interval alone, on
top of the same request costs. The ratio printed is against that computed figure.

The last line is::

    p50_ms=<n> p99_ms=<n> healthz_p99_ms=<n> waiters=<n> load_fraction=<f> capacity_tx_per_s=<n>

(``load_fraction`` is ``-`` when ``--load-tps`` set the load.) Goals: p99_ms < 20,
healthz_p99_ms < 50 with 500 waiters at 25% of the measured capacity. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
from throughput import (
    CHILDREN,
    LOG_DIR,
    ROOT,
    Pg,
    _exit_on_signal,
    base_env,
    pick_port,
    run,
    start_web,
    wait_http,
    worker_pids,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_visibility_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
LOAD_TOPIC, VIS_TOPIC, IDLE_TOPIC = "BenchTopic", "VisTopic", "IdleTopic"
PRODUCER_GROUP, VIS_GROUP, IDLE_GROUP = "BenchGroup", "VisConsumers", "IdleConsumers"
CONSUMER_WAIT_MS = 20_000
FALLBACK_RECHECK_MS = 100.0  # the polling the wake-ups replaced (polling.POLL_SLEEP_S, 0.1 s)
GOAL_P99_MS, GOAL_HEALTHZ_P99_MS = 20.0, 50.0
LOAD_MAX_IN_FLIGHT = 16  # background transactions under way at most (then ticks are skipped)
CALIBRATE_WARMUP_S = 2.0  # uncounted start of the calibration
WAITERS_PER_CLIENT = 25  # connections per httpx client of the waiters (measure_waiters)
WAITER_SLACK_S = 1.0  # a waiter answering later than wait_ms + this is counted late

SETUP_SHELL = (
    "from broker.services.topology.writes import consumer_group_create, producer_group_create, "
    "topic_create\n"
    f"for name in {[LOAD_TOPIC, VIS_TOPIC, IDLE_TOPIC]!r}:\n"
    "    topic_create(name=name, queue_nums=4)\n"
    f"producer_group_create(name={PRODUCER_GROUP!r}, check_url=None)\n"
    f"consumer_group_create(name={VIS_GROUP!r})\n"
    f"consumer_group_create(name={IDLE_GROUP!r})\n"
)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` by nearest rank (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def prepare(pg: Pg, env: dict[str, str]) -> str:
    """Recreate and migrate the bench database, create the topics and groups; return the token
    of a new admin access key."""
    pg.recreate(pg.dbname)
    manage = [sys.executable, str(ROOT / "manage.py")]
    run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
    run([*manage, "shell", "-c", SETUP_SHELL], env=env)
    out = run([*manage, "create_access_key", "bench-visibility", "--admin"], env=env)
    return out.strip().splitlines()[-1].strip()


@dataclass
class Run:
    """What the coroutines of one bench run share."""

    client: httpx.AsyncClient
    committed_at: dict[str, float] = field(default_factory=dict)  # seq -> commit answered
    received_at: dict[str, float] = field(default_factory=dict)  # seq -> first received
    load_done: int = 0
    load_skipped: int = 0
    errors: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def transaction_commit(run_: Run, topic: str, properties: dict[str, str]) -> bool:
    """Half message on ``topic`` then its commit; True when both answered 200."""
    half = await run_.client.post(
        "/api/v1/transactions",
        json={
            "producer_group": PRODUCER_GROUP,
            "topic": topic,
            "body": "visibility",
            "properties": properties,
        },
    )
    if not half.is_success:
        run_.errors.append(f"half {half.status_code}: {half.text[:200]}")
        return False
    ended = await run_.client.post(
        f"/api/v1/transactions/{half.json()['transaction_id']}/end",
        json={"producer_group": PRODUCER_GROUP, "action": "commit"},
    )
    if not ended.is_success:
        run_.errors.append(f"end {ended.status_code}: {ended.text[:200]}")
        return False
    return True


def _count_load(run_: Run, task: asyncio.Task[bool]) -> None:
    if task.cancelled() or task.exception() is not None:
        run_.errors.append(
            f"load: {task.exception()!r}" if not task.cancelled() else "load: cancelled"
        )
    elif task.result():
        run_.load_done += 1


async def background_load(run_: Run, tps: float) -> None:
    """``tps`` transactions per second on LOAD_TOPIC (each in its own task) until stopped; a
    tick finding ``LOAD_MAX_IN_FLIGHT`` still under way is skipped (counted)."""
    interval = 1 / tps
    tasks: set[asyncio.Task[bool]] = set()
    next_at = time.monotonic()
    while not run_.stop.is_set():
        if len(tasks) < LOAD_MAX_IN_FLIGHT:
            task = asyncio.create_task(transaction_commit(run_, LOAD_TOPIC, {}))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda t: _count_load(run_, t))
        else:
            run_.load_skipped += 1  # the broker is slower than the asked rate: not piled up
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await asyncio.gather(*tasks, return_exceptions=True)


async def calibrate(client: httpx.AsyncClient, *, producers: int, seconds: float) -> float:
    """What the broker sustains: ``producers`` producers committing transactions on LOAD_TOPIC
    back to back (each waits for its answers) for ``CALIBRATE_WARMUP_S`` uncounted, then
    ``seconds``; returns the committed transactions per second of the measured part.

    Raises:
        RuntimeError: no transaction was committed, or one in ten failed."""
    run_ = Run(client)
    counting = asyncio.Event()
    counted = 0

    async def producer() -> None:
        nonlocal counted
        while not run_.stop.is_set():
            if await transaction_commit(run_, LOAD_TOPIC, {}) and counting.is_set():
                counted += 1

    tasks = [asyncio.create_task(producer()) for _ in range(producers)]
    await asyncio.sleep(CALIBRATE_WARMUP_S)
    counting.set()
    began = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - began
    capacity = counted / elapsed
    run_.stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    if not counted or len(run_.errors) * 10 > counted:
        raise RuntimeError(f"calibration: {counted} committed, errors {run_.errors[:5]}")
    print(
        f"calibration: {producers} producers back to back for {elapsed:.1f} s: {counted} tx, "
        f"capacity {capacity:.1f} tx/s",
        flush=True,
    )
    return capacity


async def consumer(run_: Run) -> None:
    """Long-poll VIS_TOPIC, note when each seq was first received, ack; until stopped."""
    while not run_.stop.is_set():
        try:
            answer = await run_.client.post(
                f"/api/v1/consumer-groups/{VIS_GROUP}/receive",
                json={"topic": VIS_TOPIC, "max_messages": 32, "wait_ms": CONSUMER_WAIT_MS},
                timeout=CONSUMER_WAIT_MS / 1000 + 10,
            )
        except httpx.HTTPError as exc:
            run_.errors.append(f"receive: {exc!r}")
            continue
        now = time.monotonic()
        if answer.status_code != 200:
            run_.errors.append(f"receive {answer.status_code}: {answer.text[:200]}")
            await asyncio.sleep(0.1)
            continue
        messages = answer.json()["messages"]
        for message in messages:
            run_.received_at.setdefault(message["properties"]["seq"], now)
        if messages:
            await run_.client.post(
                f"/api/v1/consumer-groups/{VIS_GROUP}/ack",
                json={"receipt_handles": [m["receipt_handle"] for m in messages]},
            )


async def measure_latency(
    client: httpx.AsyncClient, *, commits: int, rate: float, consumers: int, load_tps: float
) -> tuple[list[float], Run]:
    """Commit ``commits`` transactions on VIS_TOPIC under the background load while
    ``consumers`` long-poll it; returns the latencies (ms) and the run."""
    run_ = Run(client)
    pollers = [asyncio.create_task(consumer(run_)) for _ in range(consumers)]
    load = asyncio.create_task(background_load(run_, load_tps))
    await asyncio.sleep(1.0)  # every consumer waiting
    started = time.monotonic()
    for seq in range(commits):
        began = time.monotonic()
        if await transaction_commit(run_, VIS_TOPIC, {"seq": str(seq)}):
            run_.committed_at[str(seq)] = time.monotonic()
        await asyncio.sleep(max(0.0, 1 / rate - (time.monotonic() - began)))
    deadline = time.monotonic() + 10
    while len(run_.received_at) < len(run_.committed_at) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    run_.stop.set()
    await load
    for poller in pollers:
        poller.cancel()
    await asyncio.gather(*pollers, return_exceptions=True)
    latencies = [
        (run_.received_at[seq] - at) * 1000
        for seq, at in run_.committed_at.items()
        if seq in run_.received_at
    ]
    missing = len(run_.committed_at) - len(latencies)
    print(
        f"latency: {len(run_.committed_at)} commits in {elapsed:.1f} s, {len(latencies)} received "
        f"({missing} not within 10 s), background {run_.load_done} tx "
        f"({run_.load_done / elapsed:.1f} tx/s, {run_.load_skipped} ticks skipped as "
        f"{LOAD_MAX_IN_FLIGHT} were under way), {len(run_.errors)} errors",
        flush=True,
    )
    for error in run_.errors[:5]:
        print(f"  error: {error}", flush=True)
    return latencies, run_


async def measure_waiters(
    client: httpx.AsyncClient, health: httpx.AsyncClient, *, waiters: int, wait_ms: int,
    ramp_s: float, load_tps: float, master: int,
) -> tuple[list[float], int, list[int], list[float]]:  # fmt: skip
    """``waiters`` receives long-polling IDLE_TOPIC while /healthz is sampled under the
    background load; returns the /healthz latencies (ms), how many waiters failed (not 200 with
    no message, or before wait_ms, or later than wait_ms + WAITER_SLACK_S), the web
    processes' thread counts while they waited and each waiter's answer time (s, from its
    send)."""
    run_ = Run(client)
    load = asyncio.create_task(background_load(run_, load_tps))
    failed = 0
    answered: list[float] = []
    # The waiters' own clients, WAITERS_PER_CLIENT connections each: one httpx client holding
    # hundreds of connections spends this process's time in its pool's bookkeeping, and its
    # waiters then see answers the server sent on time (measured: 500 answered within 16 ms of
    # wait_ms at the server, up to 4.8 s later at one shared client).
    pools = [
        httpx.AsyncClient(
            base_url=client.base_url,
            headers=client.headers,
            limits=httpx.Limits(max_connections=WAITERS_PER_CLIENT),
            timeout=wait_ms / 1000 + 30,
        )
        for _ in range(-(-waiters // WAITERS_PER_CLIENT))
    ]

    async def waiter(i: int, delay_s: float) -> None:
        nonlocal failed
        await asyncio.sleep(delay_s)
        began = time.monotonic()
        try:
            answer = await pools[i % len(pools)].post(
                f"/api/v1/consumer-groups/{IDLE_GROUP}/receive",
                json={"topic": IDLE_TOPIC, "wait_ms": wait_ms},
                timeout=wait_ms / 1000 + 30,
            )
        except httpx.HTTPError as exc:
            run_.errors.append(f"waiter: {exc!r}")
            failed += 1
            return
        took = time.monotonic() - began
        answered.append(took)
        if (
            answer.status_code != 200
            or answer.json() != {"messages": []}
            or not wait_ms / 1000 <= took <= wait_ms / 1000 + WAITER_SLACK_S
        ):
            run_.errors.append(f"waiter {answer.status_code} after {took:.2f} s")
            failed += 1

    tasks = [asyncio.create_task(waiter(i, i * ramp_s / waiters)) for i in range(waiters)]
    await asyncio.sleep(ramp_s + 2.0)  # all of them in and waiting
    threads = [thread_count(pid) for pid in worker_pids(master)]
    samples: list[float] = []
    while not all(task.done() for task in tasks[: waiters // 2]):
        began = time.monotonic()
        try:
            answer = await health.get("/healthz")
        except httpx.RemoteProtocolError:
            # The server closed the idle keep-alive connection as this request went out (the
            # sampler sat idle through the latency phase): not a slow /healthz, ask again.
            continue
        samples.append((time.monotonic() - began) * 1000)
        if answer.status_code != 200:
            run_.errors.append(f"healthz {answer.status_code}")
        await asyncio.sleep(0.02)
    await asyncio.gather(*tasks)
    run_.stop.set()
    await load
    for pool in pools:
        await pool.aclose()
    for error in run_.errors[:5]:
        print(f"  error: {error}", flush=True)
    return samples, failed, threads, answered


def thread_count(pid: int) -> int:
    """Threads of process ``pid`` (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def bench(port: int, token: str, args: argparse.Namespace, master: int) -> int:
    """Both measurements against the broker on ``port``; prints the figures, summary last."""
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=args.waiters + args.consumers + 100)
    async with (
        httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) as client,
        httpx.AsyncClient(base_url=base, timeout=10) as health,
    ):
        capacity = await calibrate(
            client, producers=args.calibrate_producers, seconds=args.calibrate_s
        )
        load_tps = args.load_tps or args.load_fraction * capacity
        print(
            f"background load: {load_tps:.1f} tx/s "
            + (
                "(--load-tps)"
                if args.load_tps
                else f"({args.load_fraction:g} of {capacity:.1f} tx/s measured)"
            ),
            flush=True,
        )
        latencies, _ = await measure_latency(
            client,
            commits=args.commits,
            rate=args.rate,
            consumers=args.consumers,
            load_tps=load_tps,
        )
        samples, failed, threads, answered = await measure_waiters(
            client,
            health,
            waiters=args.waiters,
            wait_ms=args.waiter_wait_ms,
            ramp_s=args.waiter_ramp_s,
            load_tps=load_tps,
            master=master,
        )
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(
        f"commit-to-receive ms: p50 {p50:.1f}  p90 {percentile(latencies, 0.9):.1f}  "
        f"p99 {p99:.1f}  max {max(latencies, default=0):.1f}  "
        f"mean {statistics.fmean(latencies) if latencies else 0:.1f}"
    )
    fallback_p50, fallback_p99 = FALLBACK_RECHECK_MS * 0.5, FALLBACK_RECHECK_MS * 0.99
    print(
        f"baseline without wake-ups (polling every {FALLBACK_RECHECK_MS:.0f} ms): expected p50 "
        f"{fallback_p50:.0f} ms, p99 {fallback_p99:.0f} ms; ratio p50 "
        f"{fallback_p50 / max(p50, 0.1):.0f}x, p99 {fallback_p99 / max(p99, 0.1):.0f}x"
    )
    healthz_p99 = percentile(samples, 0.99)
    print(
        f"{args.waiters} waiters on {IDLE_TOPIC} for {args.waiter_wait_ms} ms (sent over "
        f"{args.waiter_ramp_s:g} s): {failed} failed "
        f"(not empty, early or > {WAITER_SLACK_S:g} s late); /healthz {len(samples)} samples: "
        f"p50 {percentile(samples, 0.5):.1f} ms, p99 {healthz_p99:.1f} ms, "
        f"max {max(samples, default=0):.1f} ms; web process threads while waiting: {threads}; "
        f"waiters answered after (s, from their send) min {min(answered, default=0):.2f} "
        f"p50 {percentile(answered, 0.5):.2f} max {max(answered, default=0):.2f}"
    )
    met = p99 < GOAL_P99_MS and healthz_p99 < GOAL_HEALTHZ_P99_MS and failed == 0
    print(
        f"goals p99 < {GOAL_P99_MS:g} ms, healthz p99 < {GOAL_HEALTHZ_P99_MS:g} ms, every waiter "
        f"on time: {'met' if met else 'MISSED'}"
    )
    fraction = "-" if args.load_tps else f"{args.load_fraction:g}"
    print(
        f"p50_ms={p50:.1f} p99_ms={p99:.1f} healthz_p99_ms={healthz_p99:.1f} "
        f"waiters={args.waiters} load_fraction={fraction} capacity_tx_per_s={capacity:.1f}"
    )
    return 0 if latencies and failed == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """Serve the broker, measure, stop it; summary line last."""
    parser = argparse.ArgumentParser(
        description="Commit-to-receive latency of long-polling consumers, and /healthz under "
        "hundreds of waiting receives. DATABASE_URL names the server and the database (DROPPED "
        "and recreated; default halfmoon_visibility_bench).",
        epilog="Last line: p50_ms=<n> p99_ms=<n> healthz_p99_ms=<n> waiters=<n> "
        "load_fraction=<f> capacity_tx_per_s=<n>. "
        "See bench/README.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--commits", type=int, default=2000, help="measured commits")
    parser.add_argument("--rate", type=float, default=40, help="measured commits/s at most")
    parser.add_argument("--consumers", type=int, default=8, help="long-polling consumers")
    parser.add_argument(
        "--load-fraction", type=float, default=0.25,
        help="background load as a fraction of the measured capacity",
    )  # fmt: skip
    parser.add_argument(
        "--load-tps", type=float, default=0.0,
        help="background tx/s instead of --load-fraction (0: use the fraction)",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate-producers", type=int, default=16,
        help="producers sending back to back while the capacity is measured",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate-s", type=float, default=10.0, help="how long the capacity is measured (s)"
    )
    parser.add_argument("--waiters", type=int, default=500, help="concurrent waiting receives")
    parser.add_argument("--waiter-wait-ms", type=int, default=10_000, help="their wait_ms")
    parser.add_argument(
        "--waiter-ramp-s", type=float, default=0.0, help="send the waiters over this long (s)"
    )
    parser.add_argument("--port", type=int, help="web port (default: free in 18200-18249)")
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="Redis of the broker (flushed first)"
    )
    args = parser.parse_args(argv)
    if min(args.commits, args.consumers, args.waiters) < 1 or args.rate <= 0:
        parser.error("--commits, --consumers, --waiters must be >= 1 and --rate > 0")
    if not 0 <= args.waiter_ramp_s < args.waiter_wait_ms / 1000 - 2:
        parser.error("--waiter-ramp-s must be >= 0 and end 2 s before --waiter-wait-ms")
    if args.load_tps < 0 or args.waiter_wait_ms < 1000:
        parser.error("--load-tps must be >= 0 and --waiter-wait-ms >= 1000")
    if not 0 < args.load_fraction <= 1 or args.calibrate_producers < 1 or args.calibrate_s <= 0:
        parser.error("--load-fraction must be in (0, 1], --calibrate-producers >= 1, "
                     "--calibrate-s > 0")  # fmt: skip

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    env.update(REDIS_URL=args.redis_url, CELERY_BROKER_URL=args.redis_url)
    port = pick_port(args.port)
    print(
        f"bench: {args.commits} commits at <= {args.rate:g}/s, {args.consumers} consumers, "
        + (
            f"{args.load_tps:g} tx/s background"
            if args.load_tps
            else f"background {args.load_fraction:g} of the measured capacity"
        )
        + f", then {args.waiters} waiters; 2 web processes, "
        f"{os.cpu_count()} CPUs, PostgreSQL {pg.host}:{pg.port}/{pg.dbname}, {args.redis_url}; "
        f"logs in {LOG_DIR}",
        flush=True,
    )
    redis.Redis.from_url(args.redis_url).flushdb()
    token = prepare(pg, env)
    try:
        log = LOG_DIR / "visibility-uvicorn.log"
        web = start_web(env, port, log)
        wait_http(port, "/healthz", web, log)
        return asyncio.run(bench(port, token, args, web.pid))
    finally:
        CHILDREN.stop_all()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)

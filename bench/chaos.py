"""Sustained transactional load while the broker's processes are killed and the services
underneath restarted, one fault a round, then a check that nothing acknowledged was lost or
delivered twice.

    .venv/bin/python bench/chaos.py --rounds 6            # each fault once
    .venv/bin/python bench/chaos.py --rounds 100          # the issue's goal: all zeros
    .venv/bin/python bench/chaos.py --failover --rounds 20   # the primary's machine lost, 20 times

The broker runs as the quick start runs it (``bin/run --no-setup``: supervisord with web,
worker, beat and pipeline) on a PostgreSQL cluster and a Redis server of the bench's own
(``tests.e2e.services``: ``initdb`` into a temporary directory, ``redis-server`` on a free port),
so restarting them touches nothing else on the machine. A check server in this process answers
the back-checks (COMMIT_MESSAGE or ROLLBACK_MESSAGE by the transaction id's CRC).

Each round runs ``--producers`` producers (each sends a half message, then commits it (60%),
rolls it back (20%) or leaves it to the back-check (20%)) and ``--consumers`` consumers
(receive, ack) for ``--round-s`` seconds; halfway, one fault, in turn:

- ``web_worker``: SIGKILL one of the web processes (``python -m halfmoon.web``, two of them
  on one address; supervisord starts another, the other serves meanwhile);
- ``worker``: SIGKILL the Celery worker's main process (supervisord starts another);
- ``pool_child``: SIGKILL one prefork pool child (Celery starts another);
- ``beat``: SIGKILL Celery beat (supervisord starts another);
- ``postgres``: stop PostgreSQL (fast), 3 s, start it;
- ``redis``: stop Redis, 3 s, start it.

With ``--failover`` the database is a pg_auto_failover formation of the bench's own
(``tests.e2e.ha_cluster``: a monitor, a primary and a synchronous standby, each its own data
directory and port; the broker's ``DATABASE_URL`` names both data nodes with
``target_session_attrs=read-write``, as docs/operations.md "High availability" sets it up),
and the faults are ``--ha-faults`` in turn (by default ``primary_lost`` every round):

- ``primary_lost``: the primary's machine lost: its ``pg_autoctl`` and PostgreSQL killed with
  SIGKILL and its data directory moved away; the monitor promotes the standby;
- ``standby_lost``: the same to the standby;
- ``switchover``: ``pg_autoctl perform switchover``;
- ``monitor_lost``: the monitor's ``pg_autoctl`` and PostgreSQL killed, restarted 5 s later.

The load goes on until a send is acknowledged again after the fault (the failover time: from
the kill to the first acknowledged send that started after it; goal 30 s), and after the
round a lost node is replaced by a new, empty one on its address, which joins as the
synchronous standby, so that every round starts from a whole formation. Producers choose their
own msg ids and send a half message again with the same msg id until it is acknowledged, so a
send whose answer was lost in the failover is stored once or counted as doubled.

Then the load stops and, once the broker has settled, the round is verified:

- every half message acknowledged with 201 is stored, and final or still PREPARED and
  checkable (below the check max), never missing (``lost`` otherwise);
- every commit acknowledged with 200 is COMMITTED with exactly one delivered message on its
  topic and was received by the consumer group (``lost`` when missing or never received,
  ``doubled`` when stored twice); every acknowledged rollback was never delivered;
- the consumer group never received one commit twice outside redelivery (two receipts with
  ``delivery_attempt`` 1: ``doubled``);
- ``manage.py rebuild_transactions --dry-run`` finds no difference (``rebuild_diffs``).

Answers with a status of 500 or more other than 503 (the contract's answer while the database
is away) count in ``api_5xx``; 503s and refused connections are retried and counted apart. The
last line is

    rounds=<n> acked=<n> lost=<n> doubled=<n> rebuild_diffs=<n> api_5xx=<n>

with ``--failover``, followed by `` failover_p50_s=<s> failover_max_s=<s>`` (over the
``primary_lost`` rounds); the exit status is 1 when a figure is not zero or a failover took
longer than 30 s.

Needs PostgreSQL's server binaries (``initdb``) and ``redis-server`` (Debian packages
postgresql and redis-server); ``--failover`` also ``pg_autoctl`` (Debian packages
postgresql-15-auto-failover and pg-auto-failover-cli). Logs go to ``var/bench/chaos/``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# tests.support's check server sits beside helpers that import the models: set Django up (its
# test settings; this process never touches a database through it).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings_test")
import django  # noqa: E402 - the repository root is on the path only now

django.setup()

import httpx  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402

from tests.e2e.ha_cluster import AutoFailoverCluster, pg_autoctl  # noqa: E402
from tests.e2e.processes import (  # noqa: E402
    broker_env,
    free_port,
    healthy,
    main_processes,
    manage,
    program_of,
)
from tests.e2e.services import PrivatePostgres, RedisServer, pg_bin  # noqa: E402
from tests.support import CheckServer  # noqa: E402

FAULTS = ("web_worker", "worker", "pool_child", "beat", "postgres", "redis")
HA_FAULTS = ("primary_lost", "standby_lost", "switchover", "monitor_lost")
FAILOVER_GOAL_S = 30.0  # writes accepted again within this long of the primary's loss
TOPIC = "ChaosTopic"
PRODUCER_GROUP = "ChaosProducers"
CONSUMER_GROUP = "ChaosConsumers"
CHECK_MAX = 15
SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": str(CHECK_MAX),
    "WEB_CONCURRENCY": "2",
    "CELERY_CONCURRENCY": "2",
}
SETTLE_TIMEOUT_S = 120


def check_answer(transaction_id: str) -> str:
    """The check server's answer for a transaction left to the back-check."""
    even = zlib.crc32(transaction_id.encode()) % 2 == 0
    return "COMMIT_MESSAGE" if even else "ROLLBACK_MESSAGE"


@dataclass
class Ledger:
    """What the producers and consumers were told, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    halves: set[str] = field(default_factory=set)  # acknowledged with 201
    commits: set[str] = field(default_factory=set)  # acknowledged with 200, COMMITTED
    rollbacks: set[str] = field(default_factory=set)  # acknowledged with 200, ROLLED_BACK
    received: Counter[str] = field(default_factory=Counter)  # msg_id -> receipts
    first_receipts: Counter[str] = field(default_factory=Counter)  # delivery_attempt 1
    api_5xx: int = 0
    unavailable: int = 0  # 503s and refused or dropped connections, retried
    requests: int = 0
    writes: list[tuple[float, float]] = field(default_factory=list)  # acked sends: start, end

    def answered(self, response: httpx.Response | None) -> httpx.Response | None:
        """Count one request's answer (None: no answer); returns it."""
        with self.lock:
            self.requests += 1
            if response is None or response.status_code == 503:
                self.unavailable += 1
            elif response.status_code >= 500:
                self.api_5xx += 1
        return response


def request(client: httpx.Client, ledger: Ledger, method: str, path: str, **kw: object):
    """One API call, counted in ``ledger``; None when no answer came."""
    try:
        response = client.request(method, path, **kw)  # type: ignore[arg-type]
    except httpx.HTTPError:
        response = None
    return ledger.answered(response)


def producer(url: str, token: str, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    """Send, then commit, roll back or leave to the back-check, until ``stop``.

    Each half message carries a msg id of the producer's own: a send that got no answer (a
    dropped connection, a 503 while no primary answers) is sent again with the same msg id
    until it is acknowledged (201, or 200: the broker had stored it and answers the stored
    transaction), so an ambiguous outcome is resolved, never doubled."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    sent_count = 0
    with httpx.Client(base_url=url, headers=headers, timeout=15) as client:
        while not stop.is_set():
            sent_count += 1
            msg_id = f"chaos-{seed}-{sent_count}"
            transaction_id = None
            while not stop.is_set():
                started = time.monotonic()
                sent = request(
                    client, ledger, "POST", "/api/v1/transactions",
                    json={"producer_group": PRODUCER_GROUP, "topic": TOPIC, "body": "chaos",
                          "msg_id": msg_id},
                )  # fmt: skip
                if sent is not None and sent.status_code in (200, 201):
                    transaction_id = sent.json()["transaction_id"]
                    with ledger.lock:
                        ledger.halves.add(transaction_id)
                        ledger.writes.append((started, time.monotonic()))
                    break
                if sent is not None and sent.status_code < 500:
                    break
                time.sleep(0.2)
            if transaction_id is None:
                continue
            roll = rng.random()
            if roll >= 0.8:
                continue  # left to the back-check
            action = "commit" if roll < 0.6 else "rollback"
            for _ in range(100):  # an end that got no answer is sent again (idempotent)
                ended = request(
                    client, ledger, "POST", f"/api/v1/transactions/{transaction_id}/end",
                    json={"producer_group": PRODUCER_GROUP, "action": action},
                )  # fmt: skip
                if ended is not None and ended.status_code == 200:
                    with ledger.lock:
                        if ended.json()["state"] == "COMMITTED":
                            ledger.commits.add(transaction_id)
                        elif ended.json()["state"] == "ROLLED_BACK":
                            ledger.rollbacks.add(transaction_id)
                    break
                if ended is not None and ended.status_code < 500:
                    break  # e.g. 409: the back-check ended it first
                time.sleep(0.3)


def consumer(url: str, token: str, ledger: Ledger, stop: threading.Event) -> None:
    """Receive and ack from ``CONSUMER_GROUP`` until ``stop``."""
    headers = {"Authorization": f"Bearer {token}"}
    path = f"/api/v1/consumer-groups/{CONSUMER_GROUP}"
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while not stop.is_set():
            got = request(
                client, ledger, "POST", f"{path}/receive",
                json={"topic": TOPIC, "max_messages": 32, "wait_ms": 1000,
                      "invisible_duration_ms": 10_000},
            )  # fmt: skip
            if got is None or got.status_code != 200:
                time.sleep(0.2)
                continue
            messages = got.json()["messages"]
            with ledger.lock:
                for message in messages:
                    ledger.received[message["msg_id"]] += 1
                    if message["delivery_attempt"] == 1:
                        ledger.first_receipts[message["msg_id"]] += 1
            if messages:
                request(
                    client, ledger, "POST", f"{path}/ack",
                    json={"receipt_handles": [m["receipt_handle"] for m in messages]},
                )  # fmt: skip


class Broker:
    """``bin/run --no-setup`` (supervisord) with the bench's environment."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, url: str) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / "bin" / "run"), "--no-setup"], cwd=ROOT, env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 180
        while not healthy(url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start: see {self.log}")
            time.sleep(0.5)

    def programs(self) -> dict[str, psutil.Process]:
        assert self.proc is not None
        return main_processes(psutil.Process(self.proc.pid))

    def pool_children(self) -> list[psutil.Process]:
        """The Celery worker's prefork pool processes."""
        children = []
        for child in self.programs()["worker"].children():
            with suppress(psutil.Error):
                if program_of(child.cmdline()) == "worker":
                    children.append(child)
        return children

    def stop(self) -> None:
        if self.proc is None:
            return
        tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=40)
        for proc in tree:
            with suppress(psutil.Error):
                proc.kill()


def inject(
    fault: str, broker: Broker, database: PrivatePostgres | AutoFailoverCluster, redis: RedisServer
) -> str:
    """Do ``fault``; returns what was done."""
    if fault == "pool_child":
        victims = broker.pool_children()
        if not victims:
            return f"{fault}: no pool child of the worker to kill"
        victims[0].kill()
        return f"{fault}: killed pid {victims[0].pid}"
    if fault in ("web_worker", "worker", "beat"):
        victim = broker.programs()["web" if fault == "web_worker" else fault]
        victim.kill()
        return f"{fault}: killed pid {victim.pid}"
    if isinstance(database, AutoFailoverCluster):
        return inject_ha(fault, database)
    server = database if fault == "postgres" else redis
    server.stop()
    time.sleep(3)
    server.start()
    return f"{fault}: stopped 3 s"


def inject_ha(fault: str, cluster: AutoFailoverCluster) -> str:
    """One of ``HA_FAULTS`` on the formation; returns what was done. A lost node stays lost
    until ``repair``."""
    if fault in ("primary_lost", "standby_lost"):
        node = cluster.primary() if fault == "primary_lost" else cluster.standby()
        if node is None:
            return f"{fault}: no such node"
        cluster.lose_node(node)
        return f"{fault}: {node.name} (port {node.port}) killed, its data directory gone"
    if fault == "switchover":
        before = cluster.primary()
        cluster.switchover()
        after = cluster.primary()
        return f"{fault}: {before and before.name} -> {after and after.name}"
    cluster.stop_monitor()
    time.sleep(5)
    cluster.start_monitor()
    return f"{fault}: monitor killed, restarted 5 s later"


def repair(cluster: AutoFailoverCluster) -> str:
    """Replace every lost node with a new, empty one on its address (a synchronous standby once
    it has caught up); returns what was done."""
    done = []
    for node in list(cluster.nodes):
        if node.process is None:
            fresh = cluster.replace_node(node)
            done.append(f"{node.name} replaced by {fresh.name}")
    cluster.wait_settled()
    return ", ".join(done) or "nothing lost"


def failover_seconds(ledger: Ledger, fault_at: float) -> float | None:
    """Seconds from ``fault_at`` (monotonic) to the first acknowledged send that started after
    it; None when none did."""
    with ledger.lock:
        ends = [end for start, end in ledger.writes if start >= fault_at]
    return min(ends) - fault_at if ends else None


@dataclass
class Verdict:
    lost: list[str]
    doubled: list[str]
    rebuild_diffs: int


def verify(database_url: str, env: dict[str, str], ledger: Ledger) -> Verdict:
    """The round's checks (module docstring) once the broker has settled."""
    dsn = database_url.replace("postgres://", "postgresql://", 1)
    with ledger.lock:
        halves, commits = set(ledger.halves), set(ledger.commits)
        rollbacks = set(ledger.rollbacks)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        with psycopg.connect(dsn) as conn:
            states = dict(
                conn.execute(
                    "SELECT transaction_id, state FROM broker_transaction "
                    "WHERE transaction_id = ANY(%s)",
                    [list(halves)],
                ).fetchall()
            )
            stored = Counter(
                dict(
                    conn.execute(
                        "SELECT msg_id, count(*) FROM broker_message "
                        "WHERE topic = %s AND msg_id = ANY(%s) GROUP BY msg_id",
                        [TOPIC, list(halves)],
                    ).fetchall()
                )
            )
            checks = dict(
                conn.execute(
                    "SELECT transaction_id, check_times FROM broker_transaction "
                    "WHERE transaction_id = ANY(%s) AND state = 'PREPARED'",
                    [list(halves)],
                ).fetchall()
            )
        with ledger.lock:
            received = Counter(ledger.received)
            first = Counter(ledger.first_receipts)
        committed = {t for t, s in states.items() if s == "COMMITTED"}
        lost = sorted(
            [t for t in halves if t not in states]
            + [t for t in commits if states.get(t) != "COMMITTED" or not stored[t]]
            + [t for t in rollbacks if stored[t]]
            + [t for t, n in checks.items() if n >= CHECK_MAX]
        )
        unreceived = [t for t in committed if not received[t]]
        settled = not unreceived and not checks
        if settled or time.monotonic() > deadline:
            lost += unreceived
            break
        time.sleep(1)
    doubled = sorted(
        {t for t, n in stored.items() if n > 1} | {t for t, n in first.items() if n > 1}
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "rebuild_transactions", "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    diffs = 0
    if done.returncode != 0:
        found = re.search(r"differences:\s+(\d+)", done.stdout + done.stderr)
        diffs = int(found.group(1)) if found else 1
    return Verdict(lost=lost, doubled=doubled, rebuild_diffs=diffs)


def main() -> int:
    """Run the rounds and print the figures; 0 when every figure is zero."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=20.0, help="load per round (s)")
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument(
        "--failover", action="store_true",
        help="run on a pg_auto_failover formation; each round loses its primary",
    )  # fmt: skip
    parser.add_argument(
        "--ha-faults", default="primary_lost",
        help=f"with --failover, the faults taken in turn, of {','.join(HA_FAULTS)}",
    )  # fmt: skip
    parser.add_argument("--dir", default=str(ROOT / "var" / "bench" / "chaos"))
    args = parser.parse_args()
    if pg_bin() is None or shutil.which("redis-server") is None:
        print(
            "bench/chaos.py needs PostgreSQL's server binaries and redis-server: "
            "apt-get install -y postgresql redis-server",
            file=sys.stderr,
        )
        return 2
    faults: tuple[str, ...] = FAULTS
    if args.failover:
        faults = tuple(args.ha_faults.split(","))
        if pg_autoctl() is None or not set(faults) <= set(HA_FAULTS):
            print(
                "bench/chaos.py --failover needs pg_auto_failover (apt-get install -y "
                f"postgresql-15-auto-failover pg-auto-failover-cli); --ha-faults of {HA_FAULTS}",
                file=sys.stderr,
            )
            return 2
    workdir = Path(args.dir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    database: PrivatePostgres | AutoFailoverCluster
    if args.failover:
        database = AutoFailoverCluster(free_port(), (free_port(), free_port()))
    else:
        database = PrivatePostgres(free_port())
    redis = RedisServer(free_port())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    checks = CheckServer(
        answer=lambda check: (200, {"state": check_answer(check["transaction_id"])})
    )
    broker: Broker | None = None
    totals: Counter[str] = Counter()
    acked = api_5xx = 0
    failovers: list[float] = []
    try:
        if isinstance(database, AutoFailoverCluster):
            database.start()
            database_url = database.url()
        else:
            database.init()
            database.start()
            database_url = database.create_database("halfmoon_chaos")
        redis.start()
        checks.start()
        env = broker_env(
            database_url=database_url,
            redis_url=redis.url,
            var_dir=workdir / "var",
            settings={**SETTINGS, "HALFMOON_HOST": "127.0.0.1", "HALFMOON_PORT": str(port)},
        )
        manage(env, "migrate", "--noinput")
        token = manage(env, "create_access_key", "chaos", "--admin").strip().splitlines()[-1]
        broker = Broker(env, workdir / "run.log")
        broker.start(url)
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert (
            admin.post("/api/v1/topics", json={"name": TOPIC, "queue_nums": 4}).status_code == 201
        )
        group = admin.post(
            "/api/v1/producer-groups", json={"name": PRODUCER_GROUP, "check_url": checks.url}
        )
        checks.secrets[PRODUCER_GROUP] = group.json()["check_secret"]
        assert (
            admin.post("/api/v1/consumer-groups", json={"name": CONSUMER_GROUP}).status_code == 201
        )
        ledger = Ledger()
        for round_no in range(args.rounds):
            fault = faults[round_no % len(faults)]
            stop_producers, stop_consumers = threading.Event(), threading.Event()
            producers = [
                threading.Thread(
                    target=producer, args=(url, token, ledger, stop_producers, round_no * 100 + i)
                )
                for i in range(args.producers)
            ]
            consumers = [
                threading.Thread(target=consumer, args=(url, token, ledger, stop_consumers))
                for _ in range(args.consumers)
            ]
            for thread in producers + consumers:
                thread.start()
            time.sleep(args.round_s / 2)
            fault_at = time.monotonic()
            done = inject(fault, broker, database, redis)
            if isinstance(database, AutoFailoverCluster) and fault in (
                "primary_lost",
                "standby_lost",
            ):
                fault_at = database.lost_at or fault_at  # the kill itself, not the look-up
            # The load goes on for the round's second half, and at least until a write is
            # acknowledged again after the fault (at most FAILOVER_GOAL_S longer).
            deadline = time.monotonic() + args.round_s / 2
            while time.monotonic() < deadline or (
                failover_seconds(ledger, fault_at) is None
                and time.monotonic() < fault_at + FAILOVER_GOAL_S + args.round_s
            ):
                time.sleep(0.2)
            recovered = failover_seconds(ledger, fault_at)
            if args.failover and fault == "primary_lost":
                failovers.append(recovered if recovered is not None else float("inf"))
            stop_producers.set()
            for thread in producers:
                thread.join()
            # The consumers keep receiving while the round settles and is verified.
            verdict = verify(database_url, env, ledger)
            stop_consumers.set()
            for thread in consumers:
                thread.join()
            repaired = repair(database) if isinstance(database, AutoFailoverCluster) else ""
            # Every round checks everything acknowledged so far: the last round's count is the
            # run's.
            totals["lost"] = len(verdict.lost)
            totals["doubled"] = len(verdict.doubled)
            totals["rebuild_diffs"] += verdict.rebuild_diffs
            print(
                f"round {round_no + 1}: {done}; writes again after "
                f"{'none' if recovered is None else f'{recovered:.1f} s'}"
                f"{'; ' + repaired if repaired else ''}; acked halves {len(ledger.halves)}, "
                f"commits {len(ledger.commits)}, rollbacks {len(ledger.rollbacks)}; lost "
                f"{len(verdict.lost)} {verdict.lost[:5]} doubled {len(verdict.doubled)} "
                f"{verdict.doubled[:5]} rebuild_diffs {verdict.rebuild_diffs}; 5xx "
                f"{ledger.api_5xx}, unavailable {ledger.unavailable} of {ledger.requests}",
                flush=True,
            )
        acked = len(ledger.halves)
        api_5xx = ledger.api_5xx
    finally:
        if broker is not None:
            broker.stop()
        checks.stop()
        redis.stop()
        database.remove()
    line = (
        f"rounds={args.rounds} acked={acked} lost={totals['lost']} doubled={totals['doubled']} "
        f"rebuild_diffs={totals['rebuild_diffs']} api_5xx={api_5xx}"
    )
    slow = False
    if failovers:
        line += (
            f" failover_p50_s={statistics.median(failovers):.1f} "
            f"failover_max_s={max(failovers):.1f}"
        )
        slow = max(failovers) > FAILOVER_GOAL_S
    print(line)
    failed = totals["lost"] or totals["doubled"] or totals["rebuild_diffs"] or api_5xx or slow
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

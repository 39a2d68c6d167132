"""The check service at scale with real processes: two ``celery -A tasks worker
--concurrency 2`` processes and one ``celery beat`` scanning the same half queues of a fresh
PostgreSQL database, Redis database 8 as their Celery broker and rate counter, and check servers
in this process recording when each check arrives.

What is proved, per api-v1 "Back-check" and docs/design.md "Back-checks":

1. two workers never send the same check twice: no (transaction, check_times) pair twice, and
   consecutive checks of a transaction claimed at least one check interval apart (the claim
   times the broker wrote, read as each check arrives: the delivery's latency is not judged);
2. a worker SIGKILLed mid-scan loses no check: its queues are taken over within one check
   interval (plus a scan interval and slack), its in-flight checks are sent again with the same
   ``check_times`` (they were never counted), and no transaction goes unchecked for more than
   about two intervals;
3. a transaction committed by its producer while its check is in flight is resolved once,
   delivered once, and never checked again, whatever the late answer says;
4. checks stop at exactly ``HALFMOON_TRANSACTION_CHECK_MAX``, then DISCARDED with a copy on
   ``TRANS_CHECK_MAX_TIME_TOPIC``;
5. a dead producer group (requests sent, never answered) and an unreachable one (connection
   refused) do not delay a healthy group's checks: those are checked within about one scan of
   becoming due, while the dead groups are capped per round and backed off.

Every setting reaches the processes through the environment. The database is cloned per test
from the session's migrated template (``tests.e2e.session.E2E_TEMPLATE``); all processes are
killed by process group in teardown, and assertion messages carry the tails of their logs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from tests.e2e.processes import PG_ADMIN_URL, PORTS, broker_env, database_url
from tests.e2e.session import E2E_TEMPLATE
from tests.support import CheckServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).parent / "celery")
PYTHON = sys.executable
PG_ADMIN = PG_ADMIN_URL
TEMPLATE_DB = E2E_TEMPLATE
REDIS_URL = "redis://127.0.0.1:6379/8"
REFUSED_PORT = PORTS.start + 101  # bound, never listening (outside every worker's PORTS): refused
TOPIC = "ScanTopic"

INTERVAL_MS = 2000  # HALFMOON_TRANSACTION_CHECK_INTERVAL_MS
SCAN_MS = 1000  # HALFMOON_CHECK_SCAN_INTERVAL_MS (beat, whole seconds)
SLACK_MS = 1500  # task queueing and process scheduling on a loaded 2-core machine

SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "0",  # due as soon as stored
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": str(INTERVAL_MS),
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": str(SCAN_MS),
    "HALFMOON_HALF_QUEUE_NUMS": "4",
    "HALFMOON_TRANSACTION_CHECK_MAX": "1000",
    "HALFMOON_CHECK_REQUEST_TIMEOUT_MS": "10000",
}

WORKER_ARGS = (
    "worker",
    "--concurrency",
    "2",
    "-l",
    "info",
    "--without-gossip",
    "--without-mingle",
    "--without-heartbeat",
)

SHELL_SCRIPT = r"""
import json, sys
import django
django.setup()
from broker.services.topology.writes import producer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.half import transaction_prepare


def handle(cmd):
    op = cmd["op"]
    if op == "topic":
        topic_create(name=cmd["name"], queue_nums=4)
        return None
    if op == "group":
        group = producer_group_create(name=cmd["name"], check_url=cmd["check_url"])
        return group.check_secret
    if op == "prepare":
        out = []
        for i in range(cmd["count"]):
            tx, created = transaction_prepare(
                producer_group=cmd["group"], topic=cmd["topic"], body=f"{cmd['group']} {i}".encode()
            )
            assert created
            out.append([tx.transaction_id, tx.half_queue_id, tx.born_timestamp])
        return out
    if op == "end":
        tx = transaction_end(
            transaction_id=cmd["id"], producer_group=cmd["group"], action=cmd["action"]
        )
        return tx.state
    raise ValueError(f"unknown op {op}")


for line in sys.stdin:
    cmd = json.loads(line)
    try:
        reply = {"ok": True, "result": handle(cmd)}
    except Exception as exc:
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_until(condition: Callable[[], Any], timeout_s: float, every_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return bool(condition())


def pids_in_group(pgid: int) -> set[int]:
    """The live processes of a process group (a Celery worker and its pool children)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            pids.add(int(entry))
    return pids


def owner_pid(owner: str) -> int | None:
    """The pid in a lease owner ``host:pid:random`` (broker.plumbing.leases.lease_owner)."""
    parts = owner.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


# --- The check servers' records -----------------------------------------------------------------


class ClaimClock:
    """When the broker claimed the check of a transaction that has just arrived: its
    ``next_check_timestamp`` less one interval (``broker.services.checks.claim`` leases a claimed
    transaction ``next_check_after_check(now)`` ahead), read before the check is answered. The
    broker's own clock and decision, so a check's latency on a loaded machine is not judged as
    the broker's timing; one connection, serialised."""

    def __init__(self, db: str):
        self.url = database_url(db, "postgresql")
        self.lock = threading.Lock()
        self.conn: psycopg.Connection | None = None

    def __call__(self, transaction_id: str) -> int:
        with self.lock:
            if self.conn is None:
                self.conn = psycopg.connect(self.url, autocommit=True)
            (next_check,) = self.conn.execute(
                "SELECT next_check_timestamp FROM broker_transaction WHERE transaction_id = %s",
                (transaction_id,),
            ).fetchone()
        return next_check - INTERVAL_MS

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()


class Recorder:
    """Wraps a CheckServer's answers: records (arrival ms, transaction id, check_times) of every
    check as it arrives and when the broker claimed it (``ClaimClock``), tracks the checks being
    answered, then answers with ``behaviour``."""

    def __init__(self, behaviour: Callable[[dict], tuple[int, Any]], claimed_at: ClaimClock):
        self.behaviour = behaviour
        self.claimed_at = claimed_at
        self.lock = threading.Lock()
        self.arrivals: list[tuple[int, str, int]] = []
        self.claims: list[tuple[int, str, int]] = []
        self.in_flight: dict[str, int] = {}

    def __call__(self, check: Any) -> tuple[int, Any]:
        tid, times = check["transaction_id"], check["check_times"]
        arrived = now_ms()
        claimed = self.claimed_at(tid)
        with self.lock:
            self.arrivals.append((arrived, tid, times))
            self.claims.append((claimed, tid, times))
            self.in_flight[tid] = times
        try:
            return self.behaviour(check)
        finally:
            with self.lock:
                self.in_flight.pop(tid, None)

    def snapshot(self) -> list[tuple[int, str, int]]:
        with self.lock:
            return list(self.arrivals)

    def in_flight_now(self) -> dict[str, int]:
        with self.lock:
            return dict(self.in_flight)

    def by_transaction(self) -> dict[str, list[tuple[int, int]]]:
        """{transaction id: [(arrival ms, check_times), ...]} in arrival order."""
        return _by_transaction(self.snapshot())

    def claims_by_transaction(self) -> dict[str, list[tuple[int, int]]]:
        """{transaction id: [(claim ms, check_times), ...]} in arrival order."""
        with self.lock:
            return _by_transaction(list(self.claims))


def _by_transaction(records: list[tuple[int, str, int]]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for at, tid, times in records:
        out[tid].append((at, times))
    return out


def unknow(check: dict) -> tuple[int, Any]:
    return 200, {"state": "UNKNOW"}


def gaps(checks: list[tuple[int, int]]) -> list[int]:
    return [b[0] - a[0] for a, b in itertools.pairwise(checks)]


# --- The cluster: database, Redis, processes ----------------------------------------------------


class Shell:
    """A Django process on the cluster's database taking JSON commands on stdin: producers'
    and operators' writes through the services, answered in milliseconds (no start-up per call)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def call(self, op: str, timeout_s: float = 120, **args: Any) -> Any:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.lines.get(timeout=timeout_s))
        assert reply["ok"], reply["error"]
        return reply["result"]


class Cluster:
    """One test's database (cloned from the template), Redis db 8, and its processes."""

    _numbers = itertools.count(1)

    def __init__(self, log_dir: Path, var_dir: Path):
        self.db = f"halfmoon_scan_{next(self._numbers)}"
        self.log_dir = log_dir
        self.var_dir = var_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.settings = dict(SETTINGS)
        self.shell: Shell | None = None

    # database
    def create(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {self.db} TEMPLATE {TEMPLATE_DB}")
        redis.Redis.from_url(REDIS_URL).flushdb()

    def destroy(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        redis.Redis.from_url(REDIS_URL).flushdb()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(database_url(self.db, "postgresql"), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    # processes
    def env(self) -> dict[str, str]:
        return cluster_env(self.db, self.var_dir, self.settings)

    def _spawn(self, name: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed below
        try:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env(),
                stderr=log,
                start_new_session=True,
                **({"stdout": log} | kwargs),
            )
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def start_shell(self) -> Shell:
        proc = self._spawn(
            "shell",
            [PYTHON, "-c", SHELL_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.shell = Shell(proc)
        return self.shell

    def start_worker(self, name: str) -> subprocess.Popen:
        return self._spawn(name, [CELERY, "-A", "tasks", *WORKER_ARGS, "-n", f"{name}@%h"])

    def start_beat(self) -> subprocess.Popen:
        schedule = str(self.log_dir / "beat-schedule")
        return self._spawn(
            "beat", [CELERY, "-A", "tasks", "beat", "-l", "info", "--pidfile=", "-s", schedule]
        )

    def start_workers_and_beat(self, *names: str) -> None:
        for name in names:
            self.start_worker(name)
        self.start_beat()
        for name in names:
            ready = wait_until(lambda n=name: " ready." in self.log(n), 60)
            assert ready, f"worker {name} did not start\n" + self.tails()

    def kill(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def kill_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def tails(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name} (last {len(text)} lines) ---\n" + "\n".join(text))
        return "\n".join(out)

    # the broker's state
    def setup(self, groups: dict[str, str], counts: dict[str, int]) -> dict[str, Any]:
        """Create the topic, the producer groups (name -> check_url) and ``counts[group]``
        PREPARED transactions each. Returns secrets and {id: (group, half queue, born)}."""
        shell = self.shell or self.start_shell()
        shell.call("topic", name=TOPIC)
        secrets = {
            name: shell.call("group", name=name, check_url=url) for name, url in groups.items()
        }
        txs: dict[str, tuple[str, int, int]] = {}
        for group, count in counts.items():
            for tid, half_queue, born in shell.call(
                "prepare", group=group, topic=TOPIC, count=count
            ):
                txs[tid] = (group, half_queue, born)
        return {"secrets": secrets, "txs": txs}

    def states(self) -> dict[str, str]:
        return dict(self.query("SELECT transaction_id, state FROM broker_transaction"))


def cluster_env(db: str, var_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    return broker_env(
        database_url=database_url(db),
        redis_url=REDIS_URL,
        var_dir=var_dir,
        settings={
            "HALFMOON_LOG_LEVEL": "INFO",
            "HALFMOON_DB_POOL_MIN": "1",
            "HALFMOON_DB_POOL_MAX": "4",
            **settings,
        },
    )


@pytest.fixture(scope="module")
def template_db(e2e_template):
    """The session's migrated database (tests/e2e/conftest.py), cloned by every test here."""
    return e2e_template


@pytest.fixture
def cluster(template_db, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "var").mkdir()
    c = Cluster(tmp_path / "logs", tmp_path / "var")
    c.create()
    try:
        yield c
    finally:
        c.kill_all()
        c.destroy()


@contextlib.contextmanager
def recording_server(cluster: Cluster, behaviour: Callable[[dict], tuple[int, Any]] = unknow):
    claimed_at = ClaimClock(cluster.db)
    recorder = Recorder(behaviour, claimed_at)
    try:
        with CheckServer(answer=recorder) as server:
            server.recorder = recorder  # type: ignore[attr-defined]
            yield server, recorder
    finally:
        claimed_at.close()


def assert_no_check_twice_in_one_interval(
    recorder: Recorder, cluster: Cluster, context: str, allowed_repeats: set[str] = frozenset()
) -> None:
    """No (transaction, check_times) pair twice (except ``allowed_repeats``, whose checks were
    in flight in a killed worker and so never counted), and consecutive checks of one
    transaction claimed at least one check interval apart. On failure, the message shows the
    offending transactions' arrivals, claims and check journal (when each check was counted),
    relative to the first arrival."""
    pairs = Counter((tid, times) for _, tid, times in recorder.snapshot())
    repeated = {pair: n for pair, n in pairs.items() if n > 1 and pair[0] not in allowed_repeats}
    claims = recorder.claims_by_transaction()
    too_close = {
        tid for tid, checks in claims.items() if any(g < INTERVAL_MS for g in gaps(checks))
    }
    if not repeated and not too_close:
        return
    t0 = min(at for at, _, _ in recorder.snapshot())
    journal: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tid, at, times in cluster.query(
        "SELECT transaction_id, timestamp, check_times FROM broker_transactionevent "
        "WHERE kind = 'check_sent' ORDER BY id"
    ):
        journal[tid].append((at - t0, times))
    offenders = sorted({tid for tid, _ in repeated} | too_close)[:5]
    detail = "\n".join(
        f"  {tid}: arrived (ms, check_times) "
        f"{[(at - t0, t) for at, t in recorder.by_transaction()[tid]]}; "
        f"claimed {[(at - t0, t) for at, t in claims[tid]]}; counted {journal[tid]}"
        for tid in offenders
    )
    raise AssertionError(
        f"checks sent twice: {repeated}; claimed less than an interval apart: "
        f"{sorted(too_close)}\n{detail}\n{context}"
    )


# --- 1. Two workers never send one check twice ---------------------------------------------------


def test_two_workers_never_send_the_same_check_twice(cluster):
    with recording_server(cluster) as (server, recorder):
        setup = cluster.setup({"GA": server.url, "GB": server.url}, {"GA": 100, "GB": 100})
        server.secrets.update(setup["secrets"])
        txs = setup["txs"]
        assert len(txs) == 200
        assert set(Counter(q for _, q, _ in txs.values())) == {0, 1, 2, 3}

        cluster.start_workers_and_beat("w1", "w2")
        # Several rounds: every transaction checked at least three times.
        enough = wait_until(
            lambda: (
                len(recorder.by_transaction()) == 200
                and min(len(c) for c in recorder.by_transaction().values()) >= 3
            ),
            60,
            0.5,
        )
        # Counted after the kill: what a killed round sent but never applied stays uncounted
        # (at most one check per transaction), never more.
        cluster.kill_all()
        db_counts = dict(
            cluster.query("SELECT transaction_id, check_times FROM broker_transaction")
        )
        context = cluster.tails()
        assert enough, (
            f"checks per transaction: {Counter(len(c) for c in recorder.by_transaction().values())}"
            f"\n{context}"
        )
        received = server.received()

    assert all(r.signature_valid for r in received)
    assert_no_check_twice_in_one_interval(recorder, cluster, context)
    for tid, checks in recorder.by_transaction().items():
        # Each check carries the count of checks delivered before it, plus one.
        assert [times for _, times in checks] == list(range(1, len(checks) + 1)), (tid, checks)
        # Counted as delivered (the last one may have been in flight at the kill).
        assert len(checks) - 1 <= db_counts[tid] <= len(checks), (tid, checks, db_counts[tid])
    # Both workers took part in scanning the same four queues.
    for name in ("w1", "w2"):
        assert "half queue" in cluster.log(name), f"{name} never scanned\n{context}"


# --- 2. A worker killed mid-scan loses no check ----------------------------------------------


def test_a_worker_killed_mid_scan_loses_no_check_and_the_other_takes_over(cluster):
    slow_s = 0.6

    def slow(check):
        time.sleep(slow_s)
        return 200, {"state": "UNKNOW"}

    with recording_server(cluster, slow) as (server, recorder):
        setup = cluster.setup({"G": server.url}, {"G": 40})
        server.secrets.update(setup["secrets"])
        queue_of = {tid: q for tid, (_, q, _) in setup["txs"].items()}

        cluster.start_workers_and_beat("a", "b")
        a_pgid = cluster.procs["a"].pid

        def a_holds_a_queue_with_checks_in_flight() -> dict[int, dict[str, int]] | None:
            a_pids = pids_in_group(a_pgid)
            now = now_ms()
            leases = cluster.query(
                "SELECT name, owner FROM broker_scanlease WHERE expires_timestamp > %s", (now,)
            )
            held = {int(name.split(":")[1]) for name, owner in leases if owner_pid(owner) in a_pids}
            flying = recorder.in_flight_now()
            found = {q: {tid: t for tid, t in flying.items() if queue_of[tid] == q} for q in held}
            found = {q: f for q, f in found.items() if f}
            return found or None

        found: dict[int, dict[str, int]] | None = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not found:
            found = a_holds_a_queue_with_checks_in_flight()
            if not found:
                time.sleep(0.05)
        assert found, "worker a never held a lease with checks in flight\n" + cluster.tails()
        a_pids = pids_in_group(a_pgid)
        cluster.kill("a")
        killed_at = now_ms()
        # The queues a held when it died, and until when: a's last checks may still be on the
        # wire at the kill (sent, not yet read by the check server) and arrive after it, but no
        # other worker can take a queue before a's lease on it expires.
        a_leases = {
            int(name.split(":")[1]): expires
            for name, owner, expires in cluster.query(
                "SELECT name, owner, expires_timestamp FROM broker_scanlease"
            )
            if owner_pid(owner) in a_pids
        }
        a_queues = set(found) | set(a_leases)

        def sent_by_a(at: int, tid: str) -> bool:
            return at < killed_at or at < a_leases.get(queue_of[tid], 0)

        in_flight = {tid: t for f in found.values() for tid, t in f.items()}

        # Worker b alone for four check intervals.
        time.sleep(4 * INTERVAL_MS / 1000 + 1)
        end = now_ms()
        leases = cluster.query("SELECT name, owner, expires_timestamp FROM broker_scanlease")
        cluster.kill_all()
        context = (
            f"killed at {killed_at}, a's queues {a_queues}, a's leases {a_leases}, "
            f"in flight {in_flight}, "
            f"leases at the end {leases}\n" + cluster.tails()
        )

    by_tx = recorder.by_transaction()
    assert set(by_tx) == set(queue_of), context

    # b took a's queues over within one check interval (a's lease lasts half of one).
    for q in a_queues:
        after = [
            at
            for at, tid, _ in recorder.snapshot()
            if queue_of[tid] == q and not sent_by_a(at, tid)
        ]
        assert after, f"queue {q} was never checked after the kill\n{context}"
        assert after[0] - killed_at <= INTERVAL_MS + SCAN_MS + SLACK_MS, (
            f"queue {q} taken over {after[0] - killed_at} ms after the kill\n{context}"
        )

    # No check in flight at the kill is lost: each is sent again, with the same check_times if
    # a's round never counted it (a check counts once its outcome is applied), or the next one.
    for tid, times in in_flight.items():
        later = [(at, t) for at, t in by_tx[tid] if not sent_by_a(at, tid)]
        assert later, f"{tid}'s check in flight at the kill was lost\n{context}"
        assert later[0][1] in (times, times + 1), (tid, times, later, context)

    # Nothing checked twice in one interval; nothing left unchecked for more than about two.
    # Besides the checks still being answered at the kill, a check already answered but not yet
    # counted by a (a round counts its checks once all its answers are in) died with a too, and
    # is rightly sent again with the same check_times; so did a check a sent just before the kill
    # that reached the check server only after it.
    counted_before_kill = {
        (tid, times)
        for tid, times, at in cluster.query(
            "SELECT transaction_id, check_times, timestamp FROM broker_transactionevent "
            "WHERE kind = 'check_sent'"
        )
        if at < killed_at
    }
    uncounted_at_kill = {
        tid
        for at, tid, times in recorder.snapshot()
        if sent_by_a(at, tid) and (tid, times) not in counted_before_kill
    }
    assert_no_check_twice_in_one_interval(
        recorder, cluster, context, allowed_repeats=set(in_flight) | uncounted_at_kill
    )
    bound = 2 * INTERVAL_MS + SCAN_MS + SLACK_MS
    for tid, checks in by_tx.items():
        longest = max(gaps(checks) + [end - checks[-1][0]])
        assert longest <= bound, f"{tid} unchecked for {longest} ms: {checks}\n{context}"


# --- 3. Resolved while its check is in flight -------------------------------------------------


def test_a_transaction_committed_while_its_check_is_in_flight_is_resolved_once(cluster):
    arrived = threading.Event()
    release = threading.Event()
    target: dict[str, str] = {}

    def answer(check):
        if check["transaction_id"] == target.get("id"):
            arrived.set()
            release.wait(20)
            return 200, {"state": "ROLLBACK_MESSAGE"}
        return 200, {"state": "UNKNOW"}

    with recording_server(cluster, answer) as (server, recorder):
        setup = cluster.setup({"G": server.url}, {"G": 12})
        server.secrets.update(setup["secrets"])
        tid = next(iter(setup["txs"]))
        target["id"] = tid

        cluster.start_workers_and_beat("w1", "w2")
        assert arrived.wait(60), "the check never arrived\n" + cluster.tails()
        state = cluster.shell.call("end", id=tid, group="G", action="commit")
        assert state == "COMMITTED"
        release.set()
        released_at = now_ms()
        # Three more check intervals: the others keep being checked, the target never again.
        others_checked = wait_until(
            lambda: (
                all(
                    sum(at > released_at for at, _ in checks) >= 2
                    for other, checks in recorder.by_transaction().items()
                    if other != tid
                )
                and len(recorder.by_transaction()) == 12
            ),
            30,
            0.5,
        )
        time.sleep(max(0.0, (released_at + 3 * INTERVAL_MS - now_ms()) / 1000))
        rows = cluster.query(
            "SELECT state, resolved_by, check_times FROM broker_transaction "
            "WHERE transaction_id = %s",
            (tid,),
        )
        resolutions = cluster.query(
            "SELECT action, resolved_by FROM broker_resolution WHERE transaction_id = %s", (tid,)
        )
        delivered = cluster.query(
            "SELECT count(*) FROM broker_message WHERE topic = %s AND msg_id = %s", (TOPIC, tid)
        )
        events = cluster.query(
            "SELECT kind, outcome, check_times FROM broker_transactionevent "
            "WHERE transaction_id = %s ORDER BY id",
            (tid,),
        )
        cluster.kill_all()
        context = cluster.tails()

    assert others_checked, f"the scan stopped checking the others\n{context}"
    assert rows == [("COMMITTED", "producer", 1)], (rows, context)
    assert resolutions == [("COMMIT", "producer")], (resolutions, context)
    assert delivered == [(1,)], (delivered, context)
    # The late answer was a delivered check (counted, journalled), not a resolution; the 200
    # ROLLBACK_MESSAGE answer the scan then applied was refused (already committed) and journalled.
    assert events[0] == ("check_sent", "ROLLBACK_MESSAGE", 1), (events, context)
    assert events[1:] in ([], [("end_refused", "ROLLBACK", 1)]), (events, context)
    assert [times for _, times in recorder.by_transaction()[tid]] == [1], context
    assert f"check answer for {tid} not applied" in cluster.log("w1") + cluster.log("w2"), context
    assert_no_check_twice_in_one_interval(recorder, cluster, context)


# --- 4. Checks stop at exactly the check max --------------------------------------------------


def test_checks_stop_at_exactly_the_check_max_then_discarded(cluster):
    cluster.settings["HALFMOON_TRANSACTION_CHECK_MAX"] = "3"
    with recording_server(cluster) as (server, recorder):
        setup = cluster.setup({"G": server.url}, {"G": 20})
        server.secrets.update(setup["secrets"])
        ids = set(setup["txs"])

        cluster.start_workers_and_beat("w1", "w2")
        discarded = wait_until(lambda: set(cluster.states().values()) == {"DISCARDED"}, 60, 0.5)
        all_discarded_at = now_ms()
        # One more interval and scan: nothing more arrives.
        time.sleep((INTERVAL_MS + 2 * SCAN_MS) / 1000)
        rows = cluster.query(
            "SELECT transaction_id, state, resolved_by, discard_reason, check_times "
            "FROM broker_transaction"
        )
        copies = cluster.query(
            "SELECT msg_id, properties->>'TRANSACTION_CHECK_TIMES', "
            "properties->>'DISCARD_REASON' FROM broker_message "
            "WHERE topic = 'TRANS_CHECK_MAX_TIME_TOPIC'"
        )
        delivered = cluster.query("SELECT count(*) FROM broker_message WHERE topic = %s", (TOPIC,))
        cluster.kill_all()
        context = f"states {Counter(cluster.states().values())}\n" + cluster.tails()

    assert discarded, context
    by_tx = recorder.by_transaction()
    assert set(by_tx) == ids
    for tid, checks in by_tx.items():
        assert [times for _, times in checks] == [1, 2, 3], (tid, checks, context)
    assert not [at for at, _, _ in recorder.snapshot() if at > all_discarded_at]
    assert {row[1:] for row in rows} == {("DISCARDED", "discard", "check_max", 3)}, rows
    assert sorted(c[0] for c in copies) == sorted(ids)  # one copy each
    assert {c[1:] for c in copies} == {("3", "check_max")}
    assert delivered == [(0,)]
    assert_no_check_twice_in_one_interval(recorder, cluster, context)


# --- 5. A dead producer group does not delay a healthy one ------------------------------------


def test_a_dead_group_does_not_delay_the_checks_of_a_healthy_one(cluster):
    """DEAD's producer receives its checks and never answers in time; DOWN's refuses the
    connection. With 300 and 20 due transactions they sit in the same half queues as
    HEALTHY's few, which are nonetheless checked within about one scan of becoming due."""
    timeout_ms = 1000
    cap = 4
    cluster.settings.update(
        {
            "HALFMOON_CHECK_REQUEST_TIMEOUT_MS": str(timeout_ms),
            "HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT": str(cap),
            "HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS": "500",
        }
    )

    def never_in_time(check):
        time.sleep(timeout_ms / 1000 + 1)
        return 200, {"state": "COMMIT_MESSAGE"}

    refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    refused.bind(("127.0.0.1", REFUSED_PORT))
    try:
        with (
            recording_server(cluster, never_in_time) as (dead_server, dead),
            recording_server(cluster) as (healthy_server, healthy),
        ):
            setup = cluster.setup(
                {
                    "DEAD": dead_server.url,
                    "DOWN": f"http://127.0.0.1:{REFUSED_PORT}/check",
                    "HEALTHY": healthy_server.url,
                },
                {"DEAD": 300, "DOWN": 20},
            )
            dead_server.secrets.update(setup["secrets"])
            healthy_server.secrets.update(setup["secrets"])
            cluster.start_workers_and_beat("w1", "w2")
            assert wait_until(lambda: dead.snapshot(), 30), cluster.tails()

            # HEALTHY's transactions arrive while DEAD and DOWN are being probed and backed off.
            born: dict[str, int] = {}
            for _ in range(2):
                time.sleep(1.5)
                for tid, _, at in cluster.shell.call(
                    "prepare", group="HEALTHY", topic=TOPIC, count=4
                ):
                    born[tid] = at
            # Until each of HEALTHY's has been checked three times (about three intervals).
            wait_until(
                lambda: all(len(healthy.by_transaction().get(tid, ())) >= 3 for tid in born), 60
            )
            observed_until = now_ms()
            groups = {
                name: (failures, backoff, unreachable)
                for name, failures, backoff, unreachable in cluster.query(
                    "SELECT name, check_failures, check_backoff_until, unreachable_since "
                    "FROM broker_producergroup"
                )
            }
            events = cluster.query(
                "SELECT t.producer_group, e.kind, e.outcome, e.timestamp, t.half_queue_id "
                "FROM broker_transactionevent e JOIN broker_transaction t "
                "ON t.transaction_id = e.transaction_id"
            )
            check_times = cluster.query(
                "SELECT producer_group, transaction_id, check_times FROM broker_transaction"
            )
            cluster.kill_all()
            context = f"groups {groups}\n" + cluster.tails()
    finally:
        refused.close()

    # HEALTHY: first check claimed within about one scan of being stored (due at once), each
    # next one within about one scan of its interval passing (claim times: the broker's clock).
    checks = healthy.claims_by_transaction()
    assert set(checks) == set(born), context
    first_delays = {tid: checks[tid][0][0] - born[tid] for tid in born}
    bound = SCAN_MS + timeout_ms + SLACK_MS
    assert max(first_delays.values()) <= bound, f"first check delays {first_delays}\n{context}"
    for tid, claims in checks.items():
        late = [g - INTERVAL_MS for g in gaps(claims) if g - INTERVAL_MS > bound]
        assert not late, f"{tid} checked late by {late} ms: {claims}\n{context}"
        assert len(claims) >= 3, (tid, claims, context)
        assert observed_until - claims[-1][0] <= INTERVAL_MS + bound, (tid, claims, context)
    assert groups["HEALTHY"][:2] == (0, None), context
    assert_no_check_twice_in_one_interval(healthy, cluster, context)

    # DEAD: at most `cap` checks per round of a half queue; timed out after sending, so each
    # counted as UNKNOW (journal outcome TIMEOUT); backed off.
    dead_rounds = Counter((ts, q) for g, kind, _, ts, q in events if g == "DEAD")
    assert dead_rounds and max(dead_rounds.values()) <= cap, (dead_rounds, context)
    dead_events = [(kind, outcome) for g, kind, outcome, _, _ in events if g == "DEAD"]
    assert set(dead_events) == {("check_sent", "TIMEOUT")}, context
    assert len(dead.snapshot()) < 300, context  # far from one check per due transaction
    dead_counted = sum(t for g, _, t in check_times if g == "DEAD")
    assert dead_counted == len(dead_events), context
    failures, backoff, unreachable = groups["DEAD"]
    assert failures >= 2 and backoff is not None and unreachable is None, context

    # DOWN: never counted, journalled as undelivered, capped per round too, unreachable.
    down_rounds = Counter((ts, q) for g, kind, _, ts, q in events if g == "DOWN")
    assert down_rounds and max(down_rounds.values()) <= cap, (down_rounds, context)
    assert {(kind, outcome) for g, kind, outcome, _, _ in events if g == "DOWN"} == {
        ("check_undelivered", "UNDELIVERED")
    }, context
    assert {t for g, _, t in check_times if g == "DOWN"} == {0}, context
    failures, backoff, unreachable = groups["DOWN"]
    assert failures >= 2 and backoff is not None and unreachable is not None, context

"""A real Celery worker killed in the middle of a back-check round loses no transaction and
resolves none twice once a new worker runs.

Everything is real: a fresh PostgreSQL database (``halfmoon_crash``), Redis db 7, ``celery
worker`` and ``celery beat`` processes started with the project's settings, and a slow check
server in this process answering COMMIT_MESSAGE for half of the transactions and
ROLLBACK_MESSAGE for the rest. The worker and beat are SIGKILLed (whole process groups) while
checks are in flight, then started again.

Right after the kill, and again at the end, ``manage.py rebuild_transactions --dry-run`` must
find the stored transaction state equal to what the commit log and journals say (exit 0).

The dead worker's lease on the half queues it was scanning stays until it expires
(``broker.rules.checks.scan_lease_ttl_ms``, at least 30 s): the settings below keep it at 30 s,
and the test waits it out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import redis

from tests.e2e.processes import PG_ADMIN_URL, broker_env, database_url
from tests.e2e.session import migrated_template
from tests.support import CheckServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
CELERY = str(VENV_BIN / "celery")
PYTHON = sys.executable
DB_NAME = "halfmoon_crash"
PG_ADMIN = PG_ADMIN_URL
PG_CRASH = database_url(DB_NAME, "postgresql")
REDIS_URL = "redis://127.0.0.1:6379/7"
TRANSACTIONS = 50
TOPIC = "CrashTopic"
GROUP = "CrashGroup"

SETUP_SCRIPT = """
import json, os
from broker.services.topology.writes import producer_group_create, topic_create
from broker.services.transactions.half import transaction_prepare
topic_create(name=os.environ["CRASH_TOPIC"], queue_nums=4)
url = os.environ["CRASH_CHECK_URL"]
group = producer_group_create(name=os.environ["CRASH_GROUP"], check_url=url)
ids = []
for i in range(int(os.environ["CRASH_TRANSACTIONS"])):
    tx, _ = transaction_prepare(
        producer_group=group.name, topic=os.environ["CRASH_TOPIC"], body=f"crash {i}".encode()
    )
    ids.append(tx.transaction_id)
print(json.dumps({"secret": group.check_secret, "ids": ids}))
"""


def _expected(transaction_id: str) -> str:
    """The check server's answer for a transaction: commit for about half of them."""
    return "COMMIT_MESSAGE" if zlib.crc32(transaction_id.encode()) % 2 == 0 else "ROLLBACK_MESSAGE"


def _delay_s(transaction_id: str) -> float:
    """Each answer takes 1-2 s, so a round is always in flight when the worker dies."""
    return 1.0 + (zlib.crc32(b"delay" + transaction_id.encode()) % 100) / 100


class Processes:
    """Celery processes started in their own sessions, each logging to a file."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [CELERY, "-A", "tasks", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def kill_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def tails(self, lines: int = 40) -> str:
        out = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name} (last {len(text)} lines) ---\n" + "\n".join(text))
        return "\n".join(out)


def _recreate_database() -> None:
    """``DB_NAME``, migrated: a copy of the session's migrated template."""
    template = migrated_template()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME} TEMPLATE {template}")


def _drop_database() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def _query(sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(PG_CRASH, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _states() -> dict[str, str]:
    return dict(_query("SELECT transaction_id, state FROM broker_transaction"))


@pytest.fixture
def crash_env(tmp_path):
    _recreate_database()
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = broker_env(
        database_url=database_url(DB_NAME),
        redis_url=REDIS_URL,
        var_dir=tmp_path / "var",
        settings={
            "HALFMOON_LOG_LEVEL": "INFO",
            # Due at once, checked again every second, never discarded in this test.
            "HALFMOON_TRANSACTION_TIMEOUT_MS": "0",
            "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
            "HALFMOON_TRANSACTION_CHECK_MAX": "1000",
            # Small batches so each queue needs several rounds; a lease TTL of 30 s.
            "HALFMOON_CHECK_BATCH_SIZE": "5",
            "HALFMOON_CHECK_CONCURRENCY": "5",
            "HALFMOON_CHECK_REQUEST_TIMEOUT_MS": "4000",
            "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
            "HALFMOON_HALF_QUEUE_NUMS": "4",
        },
    )
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    processes = Processes(env, log_dir)
    try:
        yield env, processes
    finally:
        processes.kill_all()
        _drop_database()
        redis.Redis.from_url(REDIS_URL).flushdb()


def _wait(condition, timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()


def _rebuild_dry_run(env: dict[str, str]) -> dict:
    """``manage.py rebuild_transactions --dry-run --json`` against the crash database: the
    derived state rebuilt from the commit log must match the stored rows (exit 0)."""
    run = subprocess.run(
        [PYTHON, "manage.py", "rebuild_transactions", "--dry-run", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["differences"] == []
    return report


def test_worker_killed_during_a_check_round_loses_nothing_and_resolves_nothing_twice(crash_env):
    env, processes = crash_env
    server = CheckServer()

    def slow_answer(check):
        transaction_id = check.get("transaction_id", "") if isinstance(check, dict) else ""
        time.sleep(_delay_s(transaction_id))
        return 200, {"state": _expected(transaction_id)}

    server.answer = slow_answer
    with server:
        setup = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", SETUP_SCRIPT],
            cwd=ROOT,
            env={
                **env,
                "CRASH_TOPIC": TOPIC,
                "CRASH_GROUP": GROUP,
                "CRASH_CHECK_URL": server.url,
                "CRASH_TRANSACTIONS": str(TRANSACTIONS),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        created = json.loads(setup.stdout.strip().splitlines()[-1])
        ids: list[str] = created["ids"]
        server.secrets[GROUP] = created["secret"]
        assert len(set(ids)) == TRANSACTIONS
        assert set(_states().values()) == {"PREPARED"}
        expected = {tid: _expected(tid) for tid in ids}
        assert 0 < sum(v == "COMMIT_MESSAGE" for v in expected.values()) < TRANSACTIONS

        worker_args = (
            "worker",
            "--concurrency",
            "2",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
        )
        beat_args = (
            "beat",
            "-l",
            "info",
            "--pidfile=",
            "-s",
            str(processes.log_dir / "beat-schedule"),
        )

        # 1. A worker and beat start checking; kill both while checks are in flight.
        processes.start("worker-1", *worker_args, "-n", "crash1@%h")
        processes.start("beat-1", *beat_args)
        arrived = _wait(lambda: len(server.received()) >= 6, 60)
        assert arrived, "no back-check arrived\n" + processes.tails()
        leases_at_kill = _query("SELECT name, owner, expires_timestamp FROM broker_scanlease")
        processes.kill("worker-1")
        processes.kill("beat-1")
        received_at_kill = {r.transaction_id for r in server.received()}
        states_at_kill = _states()
        in_flight = {tid for tid in received_at_kill if states_at_kill[tid] == "PREPARED"}
        unchecked = {tid for tid, state in states_at_kill.items() if state == "PREPARED"}
        context = (
            f"received at kill: {len(received_at_kill)}, unresolved at kill: {len(unchecked)}, "
            f"leases at kill: {leases_at_kill}\n"
        )
        assert in_flight, "the worker was not killed during a round\n" + context + processes.tails()
        assert len(unchecked) > len(in_flight), (
            "every transaction was checked before the kill\n" + context
        )
        # Right after the kill, the rebuild from the commit log finds the rows consistent.
        assert _rebuild_dry_run(env)["transactions"] == TRANSACTIONS

        # 2. A new worker and beat finish the job once the dead worker's leases expire.
        processes.start("worker-2", *worker_args, "-n", "crash2@%h")
        processes.start("beat-2", *beat_args)
        done = _wait(lambda: "PREPARED" not in _states().values(), 80, interval_s=0.5)
        states = _states()
        context += f"states: {sorted(states.items())}\n"
        assert done, "transactions left PREPARED\n" + context + processes.tails()
        # The last partial Op batch is written once it is HALFMOON_OP_BATCH_INTERVAL_MS old
        # (RIP-50), by beat's flush or a scan's: wait for it while they still run.
        flushed = _wait(
            lambda: (
                not _query(
                    "SELECT count(*) FROM broker_resolution WHERE op_commit_log_offset IS NULL"
                )[0][0]
            ),
            20,
            interval_s=0.5,
        )
        assert flushed, "the Op journal was not flushed\n" + context + processes.tails()
        processes.kill_all()

        requests = server.received()
    assert all(r.signature_valid for r in requests), "a check had a bad signature"

    # Every transaction ended as the producer answered.
    for tid in ids:
        want = "COMMITTED" if expected[tid] == "COMMIT_MESSAGE" else "ROLLED_BACK"
        assert states[tid] == want, (tid, states[tid], want, context + processes.tails())

    # Exactly one resolution each, by the check.
    resolutions = _query(
        "SELECT transaction_id, count(*), min(action), min(resolved_by) FROM broker_resolution "
        "GROUP BY transaction_id"
    )
    assert len(resolutions) == TRANSACTIONS
    for tid, count, action, resolved_by in resolutions:
        assert count == 1, (tid, count)
        assert action == ("COMMIT" if expected[tid] == "COMMIT_MESSAGE" else "ROLLBACK")
        assert resolved_by == "check"

    # One delivered message per committed transaction, none for rolled back ones.
    delivered = dict(
        _query(
            "SELECT msg_id, count(*) FROM broker_message WHERE topic = %s GROUP BY msg_id", (TOPIC,)
        )
    )
    committed = {tid for tid in ids if expected[tid] == "COMMIT_MESSAGE"}
    assert set(delivered) == committed
    assert set(delivered.values()) == {1}

    # Queue offsets: no duplicate, no gap, on the real topic and the system topics.
    for topic, queue_id, offsets in _query(
        "SELECT topic, queue_id, array_agg(queue_offset ORDER BY queue_offset) FROM broker_message "
        "GROUP BY topic, queue_id"
    ):
        assert offsets == list(range(len(offsets))), (topic, queue_id, offsets)
    # The Op messages name every resolved half offset exactly once.
    ops = _query(
        "SELECT queue_id, convert_from(body, 'UTF8') FROM broker_message "
        "WHERE topic = 'RMQ_SYS_TRANS_OP_HALF_TOPIC'"
    )
    named = [(q, part) for q, body in ops for part in body.split(",") if part]
    assert len(named) == TRANSACTIONS
    assert len(set(named)) == TRANSACTIONS
    # Checks in flight when the first worker died were asked again by the new one, not lost.
    asked = Counter(r.transaction_id for r in requests)
    assert all(asked[tid] >= 2 for tid in in_flight), {tid: asked[tid] for tid in in_flight}
    # And after the recovery the rebuild still finds no difference.
    report = _rebuild_dry_run(env)
    assert report["transactions"] == TRANSACTIONS
    assert report["half_messages"] == TRANSACTIONS and report["op_messages"] == len(ops)

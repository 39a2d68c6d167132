"""End to end: RocketMQ's transaction example (``manage.py demo``) against real broker processes.

For PostgreSQL (a fresh database) and for the embedded SQLite default (a temporary file), this
starts uvicorn (2 workers), a Celery worker (prefork, 2 processes) and Celery beat with short
check settings, runs the demo as a subprocess and checks its outcome, then reads the database
directly to confirm it: 1, 4, 7 committed and consumed; 2, 5, 8 rolled back; 0, 3, 6, 9
discarded after 3 checks. Every process group is terminated afterwards.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

import httpx
import psycopg
import pytest
import redis

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DATABASE = "halfmoon_e2e_pg"
PORTS = range(18000, 18050)
CHECK_SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": "3",
}
STARTUP_TIMEOUT_S = 60
DEMO_TIMEOUT_S = 60
EXPECTED_CONSUMED = ["Hello RocketMQ 1", "Hello RocketMQ 4", "Hello RocketMQ 7"]


def free_port() -> int:
    """A port of 18000-18049 nobody listens on (tried in random order, so parallel runs
    rarely pick the same one)."""
    for port in random.sample(list(PORTS), len(PORTS)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18000-18049")


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Stack:
    """The broker's processes, each in its own process group with its own log file."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, *args: str) -> None:
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def report(self) -> str:
        parts = []
        for name, log in self.logs.items():
            proc = self.procs[name]
            parts.append(f"----- {name} (exit {proc.poll()}) {log}\n{tail(log)}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
        assert not dead, f"{', '.join(dead)} exited early\n{self.report()}"

    def wait_until(self, what: str, predicate, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            if predicate():
                return
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}\n{self.report()}")

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left after 15 s."""
        for proc in self.procs.values():
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers, e.g. prefork children
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database (dropped first if present, and afterwards)."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DATABASE}")
    try:
        yield f"postgres://postgres@127.0.0.1:5432/{PG_DATABASE}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")


def db_outcome(backend: str, database_url: str) -> tuple[Counter, list[str]]:
    """(Counter of (state, check_times) of the transactions, sorted bodies on TranTest)."""
    tx_sql = "SELECT state, check_times FROM broker_transaction"
    msg_sql = "SELECT body FROM broker_message WHERE topic = 'TranTest'"
    if backend == "postgresql":
        with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
            txs = conn.execute(tx_sql).fetchall()
            bodies = conn.execute(msg_sql).fetchall()
    else:
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            txs = conn.execute(tx_sql).fetchall()
            bodies = conn.execute(msg_sql).fetchall()
        finally:
            conn.close()
    return Counter(map(tuple, txs)), sorted(bytes(b).decode() for (b,) in bodies)


def consumed_block(lines: list[str]) -> list[str]:
    """The lines after the demo's last ``Consumed:`` header."""
    assert "Consumed:" in lines
    start = len(lines) - 1 - lines[::-1].index("Consumed:")
    return [line for line in lines[start + 1 :] if line.strip()]


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_demo_end_to_end(backend: str, tmp_path: Path) -> None:
    redis_url = (
        "redis://127.0.0.1:6379/5" if backend == "postgresql" else "redis://127.0.0.1:6379/6"
    )
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()

    with pg_database() if backend == "postgresql" else nullcontext(None) as pg_url:
        database_url = pg_url or f"sqlite:///{tmp_path / 'halfmoon.sqlite3'}"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("HALFMOON_", "CELERY_"))},
            **CHECK_SETTINGS,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
            "HALFMOON_VAR_DIR": str(tmp_path / "var"),
            "PYTHONUNBUFFERED": "1",
        }
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrate.returncode == 0, migrate.stdout + migrate.stderr

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        stack = Stack(env, tmp_path)
        try:
            stack.start(
                "web", "-m", "uvicorn", "halfmoon.asgi:application",
                "--host", "127.0.0.1", "--port", str(port), "--workers", "2",
            )  # fmt: skip
            stack.start(
                "worker", "-m", "celery", "-A", "tasks", "worker", "--concurrency", "2",
                "--pool", "prefork", "-l", "info",
            )  # fmt: skip
            stack.start(
                "beat", "-m", "celery", "-A", "tasks", "beat", "-l", "info",
                "-s", str(tmp_path / "celerybeat-schedule"),
            )  # fmt: skip
            stack.wait_until(f"{url}/healthz", lambda: healthy(url))
            stack.wait_until(
                "the Celery worker",
                lambda: " ready." in stack.logs["worker"].read_text(errors="replace"),
            )

            try:
                command = ["manage.py", "demo", "--url", url, "--timeout-s", str(DEMO_TIMEOUT_S)]
                demo = subprocess.run(
                    [sys.executable, *command],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=DEMO_TIMEOUT_S + 30,
                )
            except subprocess.TimeoutExpired as exc:
                raise AssertionError(
                    f"the demo hung\n{exc.stdout}\n{exc.stderr}\n{stack.report()}"
                ) from exc
            output = f"----- demo (exit {demo.returncode})\n{demo.stdout}\n{demo.stderr}\n"
            output += stack.report()
            (tmp_path / "demo.log").write_text(demo.stdout + demo.stderr)
            lines = demo.stdout.splitlines()

            assert demo.returncode == 0, output
            assert consumed_block(lines) == EXPECTED_CONSUMED, output
            assert "Committed: 1, 4, 7 (check times 1, 1, 1)" in lines, output
            assert "Rolled back: 2, 5, 8 (check times 1, 1, 1)" in lines, output
            assert "Discarded after 3 checks: 0, 3, 6, 9" in lines, output
            for value in (0, 3, 6, 9):
                assert f"check #3 of Hello RocketMQ {value} -> UNKNOW" in lines, output
                pattern = (
                    rf"\s*Hello RocketMQ {value}\s+DISCARDED\s+check_times=3 resolved_by=discard"
                )
                assert any(re.fullmatch(pattern, line) for line in lines), output
            assert not any(line.startswith("check #4 ") for line in lines), output

            states, bodies = db_outcome(backend, database_url)
            assert states == Counter(
                {("COMMITTED", 1): 3, ("ROLLED_BACK", 1): 3, ("DISCARDED", 3): 4}
            ), output
            assert bodies == EXPECTED_CONSUMED, output
        finally:
            stack.stop()

"""End to end: RocketMQ's transaction example (``manage.py demo``) against real broker processes.

On a fresh PostgreSQL database, this starts 2 web servers, a Celery worker (prefork, 2
processes) and Celery beat with short check settings, runs the demo as a subprocess and checks
its outcome, then reads the database directly to confirm it: 1, 4, 7 committed and consumed;
2, 5, 8 rolled back; 0, 3, 6, 9 discarded after 3 checks. Every process group is terminated
afterwards. ``demo_run`` and ``demo_outcome_check`` serve tests/e2e/test_quick_start.py too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis

from tests.e2e.processes import ROOT, Stack, broker_env, free_port
from tests.e2e.session import migrated_database

pytestmark = pytest.mark.e2e

PG_DATABASE = "halfmoon_e2e_pg"
CHECK_SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": "3",
}
DEMO_TIMEOUT_S = 60
EXPECTED_CONSUMED = ["Hello RocketMQ 1", "Hello RocketMQ 4", "Hello RocketMQ 7"]


def db_outcome(database_url: str) -> tuple[Counter, list[str]]:
    """(Counter of (state, check_times) of the transactions, sorted bodies on TranTest)."""
    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
        txs = conn.execute("SELECT state, check_times FROM broker_transaction").fetchall()
        bodies = conn.execute("SELECT body FROM broker_message WHERE topic = 'TranTest'").fetchall()
    return Counter(map(tuple, txs)), sorted(bytes(b).decode() for (b,) in bodies)


def consumed_block(lines: list[str]) -> list[str]:
    """The lines after the demo's last ``Consumed:`` header."""
    assert "Consumed:" in lines
    start = len(lines) - 1 - lines[::-1].index("Consumed:")
    return [line for line in lines[start + 1 :] if line.strip()]


def demo_run(
    env: dict[str, str], url: str, cwd: Path, report: Callable[[], str]
) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py demo`` against the broker at ``url`` from ``cwd`` with ``env``.

    Raises:
        AssertionError: it hung past ``DEMO_TIMEOUT_S`` + 30 s (with ``report()``).
    """
    command = ["manage.py", "demo", "--url", url, "--timeout-s", str(DEMO_TIMEOUT_S)]
    try:
        return subprocess.run(
            [sys.executable, *command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT_S + 30,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the demo hung\n{exc.stdout}\n{exc.stderr}\n{report()}") from exc


def demo_outcome_check(
    demo: subprocess.CompletedProcess[str], database_url: str, report: str
) -> None:
    """The seed's outcome, in the demo's output and in the database at ``database_url``: 1, 4,
    7 committed (check times 1) and the only bodies consumed; 2, 5, 8 rolled back; 0, 3, 6, 9
    discarded after exactly 3 checks.

    Raises:
        AssertionError: any of it differs (with the demo's output and ``report``).
    """
    output = f"----- demo (exit {demo.returncode})\n{demo.stdout}\n{demo.stderr}\n{report}"
    lines = demo.stdout.splitlines()
    assert demo.returncode == 0, output
    assert consumed_block(lines) == EXPECTED_CONSUMED, output
    assert "Committed: 1, 4, 7 (check times 1, 1, 1)" in lines, output
    assert "Rolled back: 2, 5, 8 (check times 1, 1, 1)" in lines, output
    assert "Discarded after 3 checks: 0, 3, 6, 9" in lines, output
    for value in (0, 3, 6, 9):
        assert f"check #3 of Hello RocketMQ {value} -> UNKNOW" in lines, output
        pattern = rf"\s*Hello RocketMQ {value}\s+DISCARDED\s+check_times=3 resolved_by=discard"
        assert any(re.fullmatch(pattern, line) for line in lines), output
    assert not any(line.startswith("check #4 ") for line in lines), output

    states, bodies = db_outcome(database_url)
    assert states == Counter({("COMMITTED", 1): 3, ("ROLLED_BACK", 1): 3, ("DISCARDED", 3): 4}), (
        output
    )
    assert bodies == EXPECTED_CONSUMED, output


def test_demo_end_to_end(tmp_path: Path) -> None:
    redis_url = "redis://127.0.0.1:6379/5"
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()

    with migrated_database(PG_DATABASE) as database_url:
        env = broker_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=tmp_path / "var",
            settings=CHECK_SETTINGS,
        )

        stack = Stack(env, tmp_path)
        try:
            url = stack.start_broker(free_port())
            demo = demo_run(env, url, ROOT, stack.report)
            (tmp_path / "demo.log").write_text(demo.stdout + demo.stderr)
            demo_outcome_check(demo, database_url, stack.report())
        finally:
            stack.stop()

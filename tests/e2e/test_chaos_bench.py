"""CI runs a few rounds of ``bench/chaos.py``: each fault once (a uvicorn worker, the
Celery worker's main process, a pool child and beat SIGKILLed; PostgreSQL and Redis stopped and
started) under sustained transactional load, and nothing acknowledged is lost, delivered
twice, answered with a 5xx other than 503, or found different by the rebuild."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.services import pg_bin

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(
    r"^rounds=(\d+) acked=(\d+) lost=(\d+) doubled=(\d+) rebuild_diffs=(\d+) api_5xx=(\d+)$"
)


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed")
def test_six_rounds_of_faults_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/chaos.py", "--rounds", "6", "--round-s", "8",
         "--dir", str(tmp_path / "chaos")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    found = LAST_LINE.match(lines[-1])
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    rounds, acked, lost, doubled, diffs, api_5xx = map(int, found.groups())
    assert rounds == 6 and acked > 0, lines[-1]
    assert (lost, doubled, diffs, api_5xx) == (0, 0, 0, 0), done.stdout[-3000:]
    assert done.returncode == 0

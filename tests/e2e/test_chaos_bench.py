"""CI runs a few rounds of ``bench/chaos.py``: each fault once (a uvicorn worker, the
Celery worker's main process, a pool child and beat SIGKILLed; PostgreSQL and Redis stopped and
started) under sustained transactional load, and nothing acknowledged is lost, delivered
twice, answered with a 5xx other than 503, or found different by the rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.processes import chaos_run
from tests.e2e.services import pg_bin

pytestmark = pytest.mark.e2e


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed")
def test_six_rounds_of_faults_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    figures, status, output = chaos_run(tmp_path, "--rounds", "6", "--round-s", "8")

    assert figures["rounds"] == 6 and figures["acked"] > 0, output
    zeros = {name: figures[name] for name in ("lost", "doubled", "rebuild_diffs", "api_5xx")}
    assert zeros == dict.fromkeys(zeros, 0), output
    assert status == 0, output

"""CI runs a few rounds of ``bench/chaos.py``: each fault once (a uvicorn worker, the Celery
worker's main process, a pool child and beat SIGKILLed; PostgreSQL and Redis stopped and
started) under sustained transactional load (3 producers, 2 consumers), and nothing acknowledged
is lost, delivered twice, answered with a 5xx other than 503, or found different by the rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.processes import chaos_run
from tests.e2e.services import pg_bin

pytestmark = pytest.mark.e2e

PRODUCERS = 3
"""Producers under load (the bench's default is 8): enough to have sends, commits and checks in
flight at each fault; the bench's own runs use its default."""


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed")
def test_six_rounds_of_faults_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    figures, status, output = chaos_run(
        tmp_path, "--rounds", "6", "--round-s", "8", "--producers", str(PRODUCERS)
    )

    assert figures["rounds"] == 6 and figures["acked"] > 0, output
    zeros = {name: figures[name] for name in ("lost", "doubled", "rebuild_diffs", "api_5xx")}
    assert zeros == dict.fromkeys(zeros, 0), output
    assert status == 0, output

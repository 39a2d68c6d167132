"""End to end: ``manage.py demo --reconcile``, the quick start's demo carried through the data
pipeline. On a fresh database (a copy of the session's migrated template) this starts 2 web
servers, a Celery worker, beat and the ``pipeline`` worker (Spark on ``local[2]``) with the
README's short check and archive settings, runs the demo with ``--reconcile`` in an environment
without them (the README's second terminal: the demo waits on the settings the broker answers,
``GET /api/v1/broker-settings``, not on its own defaults) and checks the run it prints (3
committed, 3 rolled back, 4 discarded, no anomaly, its console page) and the same run through
the API with an admin key. Spark starts in the pipeline worker during the demo's first export
(20-40 s, more on a loaded machine); the timeouts allow minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
import redis

from tests.e2e.processes import ROOT, Stack, broker_env, free_port, manage

pytestmark = pytest.mark.e2e

SHORT_SETTINGS = {  # the README's demo section
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": "3",
    "HALFMOON_ARCHIVE_SEGMENT_MS": "5000",
    "HALFMOON_ARCHIVE_LAG_MS": "1000",
    "HALFMOON_ARCHIVE_INTERVAL_MS": "2000",
}
SPARK_SETTINGS = {"HALFMOON_SPARK_MASTER": "local[2]", "HALFMOON_SPARK_DRIVER_MEMORY": "1g"}
RECONCILE_TIMEOUT_S = 480  # the run once queued: Spark's start if not yet done, then the job
ARCHIVE_TIMEOUT_S = 300  # the archive standing still: Spark's start on a loaded machine
DEMO_TIMEOUT_S = 60 + 2 * ARCHIVE_TIMEOUT_S + RECONCILE_TIMEOUT_S  # the demo, archive, run


def test_the_demo_ends_with_a_clean_reconciliation_of_its_transactions(
    tmp_path: Path, migrated_database: Callable[[str], AbstractContextManager[str]]
) -> None:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()  # no Celery task left by other tests
    name = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_demo_reconcile"
    with migrated_database(name) as database_url:
        env = broker_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=tmp_path / "var",
            settings={**SHORT_SETTINGS, **SPARK_SETTINGS},
        )
        token = manage(env, "create_access_key", "x", "--admin").split()[-1]
        stack = Stack(env, tmp_path)
        try:
            url = stack.start_broker(free_port())
            stack.start(
                "pipeline", "-m", "celery", "-A", "tasks", "worker", "--queues", "pipeline",
                "--concurrency", "1", "--hostname", "pipeline@%h", "-l", "info",
            )  # fmt: skip
            stack.wait_until(
                "the pipeline worker",
                lambda: " ready." in stack.logs["pipeline"].read_text(errors="replace"),
            )
            command = [
                "manage.py", "demo", "--url", url, "--reconcile",
                "--archive-timeout-s", str(ARCHIVE_TIMEOUT_S),
                "--reconcile-timeout-s", str(RECONCILE_TIMEOUT_S),
            ]  # fmt: skip
            # The demo's terminal: the same database and Redis, none of the broker's settings.
            demo_env = broker_env(
                database_url=database_url, redis_url=redis_url, var_dir=tmp_path / "var"
            )
            assert not set(demo_env) & set(SHORT_SETTINGS)
            try:
                demo = subprocess.run(
                    [sys.executable, *command],
                    cwd=ROOT,
                    env=demo_env,
                    capture_output=True,
                    text=True,
                    timeout=DEMO_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired as exc:
                raise AssertionError(
                    f"the demo hung\n{exc.stdout}\n{exc.stderr}\n{stack.report()}"
                ) from exc
            (tmp_path / "demo.log").write_text(demo.stdout + demo.stderr)
            output = f"----- demo (exit {demo.returncode})\n{demo.stdout}\n{demo.stderr}\n"
            output += stack.report()
            lines = demo.stdout.splitlines()

            assert demo.returncode == 0, output
            assert (
                f"The broker at {url} runs with transaction timeout 1 s, check interval 1 s, "
                "check max 3; archive segments of 5 s, exported every 2 s" in lines
            ), output
            assert "Discarded after 3 checks: 0, 3, 6, 9" in lines, output
            waiting = next((line for line in lines if "waiting for the archive" in line), "")
            assert "plus 7 s to settle" in waiting, output  # the broker's, not 8 min 8 s
            head = next((line for line in lines if line.startswith("Reconciliation run ")), "")
            found = re.match(r"Reconciliation run (\d+) succeeded in ", head)
            assert found, output
            run_id = int(found.group(1))
            assert (
                "  10 transactions judged: 3 committed, 3 rolled back, 4 discarded, 0 pending"
                in (lines)
            ), output
            assert "  anomalies: none" in lines, output
            assert f"Console: {url}/console/reconciliation/{run_id}/" in lines, output

            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                run = api.get(f"/api/v1/reconciliation/runs/{run_id}").json()
                latest = api.get("/api/v1/reconciliation/runs/latest").json()
                listed = api.get("/api/v1/reconciliation/runs").json()
            assert run["state"] == "succeeded" and run["trigger"].startswith("demo:"), run
            assert run["transactions"] == 10, run
            assert {k: v for k, v in run["states"].items() if v} == {
                "COMMITTED": 3, "ROLLED_BACK": 3, "DISCARDED": 4,
            }, run  # fmt: skip
            assert run["anomaly_counts"] == {} and run["anomalies"] == [], run
            assert latest["id"] == run_id
            assert listed["runs"][0]["id"] == run_id, listed
        finally:
            stack.stop()

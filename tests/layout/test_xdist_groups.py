"""pytest-xdist's ``--dist loadgroup`` keeps an ``xdist_group`` on one worker with the pytest
installed here: bin/test relies on it (tests/conftest.py: the Spark tests share one JVM, each e2e
file its stack), and pytest 9.2 with pytest-xdist 3.8 silently dropped every group."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.name.startswith("test_grouped"):
            item.add_marker(pytest.mark.xdist_group("together"))
"""

TESTS = """
import os
import time
from pathlib import Path

def _record(name):
    Path(os.environ["RECORD_DIR"], name).write_text(os.environ["PYTEST_XDIST_WORKER"])
    time.sleep(0.2)  # so the other worker is free to take the next test meanwhile

def test_grouped_{n}():
    _record("grouped_{n}")

def test_filler_{n}():
    _record("filler_{n}")
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for n in range(4):
        (tmp_path / f"test_{n}.py").write_text(textwrap.dedent(TESTS).format(n=n))
    records = tmp_path / "records"
    records.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"]
        + ["-p", "no:cacheprovider", "-p", "no:django", str(tmp_path)],
        cwd=tmp_path,
        env={"RECORD_DIR": str(records), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {p.name: p.read_text() for p in records.iterdir()}
    grouped = {w for name, w in workers.items() if name.startswith("grouped")}
    assert len(workers) == 8
    assert len(grouped) == 1, f"the group ran on {grouped}:\n{done.stdout}"
    assert "@together" in done.stdout

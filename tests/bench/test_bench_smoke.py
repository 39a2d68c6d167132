"""Every benchmark of bench/ runs at its smoke size and prints its last line of figures (or
another test runs it whole: ``RUN_ELSEWHERE``).

Each test starts one benchmark as a subprocess (the test process's environment; its own
databases, named ``<HALFMOON_TEST_DATABASE>_bench_<name>*`` on the server of ``DATABASE_URL``,
copied from a template migrated once here, ``HALFMOON_BENCH_TEMPLATE``, and dropped after) and
judges its exit status and the keys of its last line, never its figures. The smoke sizes are
in ``SMOKE``; the tools each benchmark needs are named in bench/README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_bench"
SERVER_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
TIMEOUT_S = 900  # per benchmark; reconcile took 385 s at a load average of 15

# name: (arguments of the smoke size, the last line's keys in order)
SMOKE: dict[str, tuple[list[str], list[str]]] = {
    "console_latency": (
        ["--changes", "4", "--pending", "40", "--list-pending", "400", "--requests", "3"],
        ["p50_ms", "p95_ms"],
    ),
    "filters": (
        ["--messages", "2000", "--rounds", "1"],
        ["star_us", "tag_us", "sql_us", "tag_ratio", "sql_ratio"],
    ),
    "timers": (
        ["--messages", "1000", "--scheduled", "10000", "--rate-sends", "200", "--spread-s", "1"],
        ["late_p50_ms", "late_p99_ms", "lost", "doubled", "send_ratio"],
    ),
    "fuzz": (["--requests", "20"], ["requests", "server_errors", "schema_violations"]),
    "grpc_throughput": (
        ["--producers", "1", "--threads", "2", "--duration", "2", "--warmup", "1"],
        ["grpc_tx_per_s", "http_tx_per_s", "ratio", "server_cpu_ms_per_tx"],
    ),
    "message_search": (
        ["--messages", "5000", "--searches", "20"],
        ["key_p95_ms", "range_p95_ms", "id_p95_ms"],
    ),
    "metrics_cost": (
        ["--small", "1000", "--large", "3000", "--scrapes", "2", "--new", "20", "--rounds", "1"],
        ["scrape_ms_10k", "scrape_ms_1m", "ratio"],
    ),
    "op_ratio": (
        ["--duration", "2", "--connections", "2"],
        ["resolutions", "op_messages", "op_per_resolution"],
    ),
    "rebuild_cost": (["--transactions", "900"], ["transactions", "rebuild_dry_s", "rebuild_s"]),
    "reconcile": (  # 10,000: the size of its untimed warm-up, so one archive and one job more
        ["--sizes", "10000"],
        ["rows_10k_s", "scaling", "baseline_10k_s", "ratio_10k", "same_work_10k_s"]
        + ["ratio_same_work_10k"],
    ),
    "scan_cost": (
        ["--small", "1000", "--large", "2000", "--pending", "40", "--passes", "1"]
        + ["--warmup", "0"],
        ["scan_s_100k", "scan_s_1m", "ratio", "check_rate_ratio"],
    ),
    "throughput": (
        ["--duration", "2", "--warmup", "1", "--connections", "4", "--inprocess", "1"]
        + ["--bare-servings", "uvicorn", "--rabbitmq-processes", "1"],
        ["tx_per_s", "bare_best_tx_per_s", "batch_msgs_per_s", "rabbitmq_tx_per_s"]
        + ["ratio_bare", "ratio_rabbitmq"],
    ),
    "visibility": (
        ["--commits", "30", "--rate", "20", "--consumers", "2", "--calibrate-producers", "1"]
        + ["--calibrate-s", "0.5", "--load-fraction", "0.05", "--waiters", "20"]
        + ["--waiter-wait-ms", "3000"],
        ["p50_ms", "p99_ms", "healthz_p99_ms", "waiters", "load_fraction", "capacity_tx_per_s"],
    ),
}
RUN_ELSEWHERE = {
    "chaos": "tests/e2e/test_chaos_bench.py: 6 rounds, its last line's figures judged",
    "inprocess": "throughput's smoke run above (--inprocess 1: once for Halfmoon, once bare)",
}
"""Benchmarks that another test already runs whole (a second run here would only cost CPU)."""
REDIS_FLAG = {"console_latency", "grpc_throughput", "op_ratio", "scan_cost", "visibility"}


def url_for(dbname: str) -> str:
    """``DATABASE_URL`` naming database ``dbname``."""
    parts = urlsplit(SERVER_URL)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, ""))


def databases_drop(prefix: str) -> None:
    """Drop every database whose name starts with ``prefix``."""
    with psycopg.connect(url_for("postgres"), autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [prefix]
        ).fetchall()
        for (name,) in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def template() -> Iterator[str]:
    """A database migrated once (``manage.py migrate``) that the benchmarks copy."""
    name = f"{BASE}_template"
    databases_drop(name)
    with psycopg.connect(url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {
        **os.environ,
        "DATABASE_URL": url_for(name),
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=TIMEOUT_S,
    )
    yield name
    databases_drop(BASE)


@pytest.mark.e2e
@pytest.mark.parametrize("bench", sorted(SMOKE))
def test_bench_smoke(bench: str, template: str, tmp_path: Path) -> None:
    args, keys = SMOKE[bench]
    dbname = f"{BASE}_{bench}"
    if bench == "metrics_cost":
        args = [*args, "--server", url_for("").rstrip("/"), "--database", dbname]
    if bench == "grpc_throughput":
        args = [*args, "--database", dbname]
    if bench in REDIS_FLAG:
        args = [*args, "--redis-url", REDIS_URL]
    if bench == "reconcile":
        args = [*args, "--dir", str(tmp_path / bench)]
    env = {
        **os.environ,
        "DATABASE_URL": url_for(dbname),
        "REDIS_URL": REDIS_URL,
        "HALFMOON_BENCH_TEMPLATE": template,
    }
    if bench == "grpc_throughput":  # its --database is made on the server of DATABASE_URL
        env["DATABASE_URL"] = url_for("postgres")
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benchmarks choose their own settings
    try:
        done = subprocess.run(
            [sys.executable, f"bench/{bench}.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        databases_drop(dbname)
    tail = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, tail
    last = [line for line in done.stdout.splitlines() if line.strip()][-1]
    pattern = r"\s+".join(rf"{re.escape(key)}=\S+" for key in keys)
    assert re.fullmatch(pattern, last.strip()), f"last line {last!r}\n{tail}"


def test_every_benchmark_has_a_smoke_run() -> None:
    """Each runnable script of bench/ is in ``SMOKE`` or ``RUN_ELSEWHERE``, so none rots unseen."""
    scripts = {
        path.stem
        for path in (ROOT / "bench").glob("*.py")
        if 'if __name__ == "__main__":' in path.read_text()
    }
    assert scripts == set(SMOKE) | set(RUN_ELSEWHERE)

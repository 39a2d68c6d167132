"""The quick start's processes come back.

``bin/run --no-setup`` is started as a user starts it (supervisord in the foreground, on a free
port, a fresh PostgreSQL database and the tests' Redis database, with the environment of
``tests.e2e.processes.broker_env``). The Celery worker's main process and beat are then
SIGKILLed. What must hold:

- ``/healthz`` answers 200 throughout, polled every 0.2 s from before the kill to the end, and
  the web server is the same process: a dying worker or beat never takes it down (under honcho,
  the quick start's process manager before, the first death stopped everything);
- the worker and beat come back as new processes; the old worker's pool children are gone
  (Celery's prefork pool dies with its parent) and the new worker answers
  ``celery inspect ping``;
- the restarted beat and worker do their work: a half message sent after the kills is
  back-checked and committed by the check (``resolved_by`` ``check``);
- SIGINT to supervisord (Ctrl-C) stops every process it started, pool children included.

The processes are found in the process tree under ``bin/run`` by their command lines, never
through the process manager, so the test says the same thing whatever manages them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from tests.e2e.processes import (
    ROOT,
    broker_env,
    free_port,
    healthy,
    main_processes,
    manage,
    pg_database,
    tail,
)
from tests.support import CheckServer

pytestmark = pytest.mark.e2e

CELERY = str(Path(sys.executable).parent / "celery")
STARTUP_TIMEOUT_S = 180  # bin/run migrates a fresh database first
COME_BACK_TIMEOUT_S = 60
PROGRAMS = ("web", "worker", "beat", "pipeline", "timer")
LOGS = {"web": "web_0.log"}  # supervisord's web:web_0 (WEB_CONCURRENCY=1 below)
CHECK_SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
}


class HealthProbe(threading.Thread):
    """GET ``/healthz`` every 0.2 s until stopped, keeping every answer that was not 200."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answers = 0
        self.failures: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop_event.is_set():
                try:
                    status = client.get(f"{self.url}/healthz").status_code
                    if status != 200:
                        self.failures.append(f"{time.strftime('%X')} HTTP {status}")
                except httpx.HTTPError as exc:
                    self.failures.append(f"{time.strftime('%X')} {type(exc).__name__}: {exc}")
                self.answers += 1
                self._stop_event.wait(0.2)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def test_worker_and_beat_killed_come_back_while_web_answers(tmp_path: Path) -> None:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()  # no Celery task left by other tests
    name = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_supervision"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    var = tmp_path / "var"
    run_log = tmp_path / "run.log"
    answer = (200, {"state": "COMMIT_MESSAGE"})
    with pg_database(name) as database_url, CheckServer(answer=lambda check: answer) as checks:
        env = broker_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=var,
            settings={
                "HALFMOON_HOST": "127.0.0.1",
                "HALFMOON_PORT": str(port),
                "HALFMOON_GRPC_PORT": str(free_port()),  # not 8081, which another run may hold
                "WEB_CONCURRENCY": "1",
                "CELERY_CONCURRENCY": "2",
                **CHECK_SETTINGS,
            },
        )
        with run_log.open("wb") as out:
            run = subprocess.Popen(
                [str(ROOT / "bin" / "run"), "--no-setup"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        root = psutil.Process(run.pid)
        seen: set[psutil.Process] = set()  # every process started, for the cleanup
        probe = HealthProbe(url)

        def report() -> str:
            logs = [f"----- bin/run (exit {run.poll()})\n{tail(run_log)}"]
            logs += [
                f"----- {p}\n{tail(var / 'log' / LOGS.get(p, f'{p}.log'), 20)}" for p in PROGRAMS
            ]
            return "\n".join(logs)

        def wait_until(what: str, predicate: Callable[[], bool], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                assert run.poll() is None, f"bin/run exited while waiting for {what}\n{report()}"
                with suppress(psutil.Error):
                    seen.update(root.children(recursive=True))
                if predicate():
                    return
                time.sleep(0.25)
            raise AssertionError(f"timed out waiting for {what}\n{report()}")

        def ping(hostname: str) -> bool:
            done = subprocess.run(
                [CELERY, "-A", "tasks", "inspect", "ping", "-d", hostname, "--timeout", "3"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return done.returncode == 0 and "pong" in done.stdout

        try:
            wait_until("/healthz", lambda: healthy(url), STARTUP_TIMEOUT_S)
            wait_until(
                "web, worker, beat, pipeline and timer",
                lambda: set(main_processes(root)) == set(PROGRAMS),
                STARTUP_TIMEOUT_S,
            )
            worker_name = f"celery@{os.uname().nodename}"
            wait_until(f"{worker_name} answering ping", lambda: ping(worker_name), 60)
            before = main_processes(root)
            pool = before["worker"].children()
            assert len(pool) == 2, f"expected the worker's 2 pool processes: {pool}\n{report()}"

            probe.start()
            time.sleep(1)
            before["worker"].send_signal(signal.SIGKILL)
            before["beat"].send_signal(signal.SIGKILL)

            def came_back() -> bool:
                now = main_processes(root)
                return all(
                    name in now and now[name].pid != before[name].pid for name in ("worker", "beat")
                )

            wait_until("a new worker and a new beat", came_back, COME_BACK_TIMEOUT_S)
            wait_until(
                "the old worker's pool children to die with it",
                lambda: not any(child.is_running() for child in pool),
                30,
            )
            wait_until(f"the new {worker_name} answering ping", lambda: ping(worker_name), 60)
            after = main_processes(root)
            for same in ("web", "pipeline", "timer"):
                assert after[same].pid == before[same].pid, f"{same} was restarted\n{report()}"

            # The new beat schedules the scan and the new worker checks: a half message sent
            # now is committed by its back-check.
            token = manage(env, "create_access_key", "supervision-admin", "--admin").split()[-1]
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                created = api.post(
                    "/api/v1/topics", json={"name": "SupervisionTopic", "queue_nums": 1}
                )
                assert created.status_code == 201, created.text
                group = api.post(
                    "/api/v1/producer-groups",
                    json={"name": "SupervisionGroup", "check_url": checks.url},
                )
                assert group.status_code == 201, group.text
                half = api.post(
                    "/api/v1/transactions",
                    json={
                        "producer_group": "SupervisionGroup",
                        "topic": "SupervisionTopic",
                        "body": "after the kills",
                    },
                )
                assert half.status_code == 201, half.text
                tx_url = f"/api/v1/transactions/{half.json()['transaction_id']}"
                wait_until(
                    "the half message's back-check to commit it",
                    lambda: api.get(tx_url).json()["state"] == "COMMITTED",
                    60,
                )
                assert api.get(tx_url).json()["resolved_by"] == "check"

            time.sleep(1)
            probe.stop()
            assert probe.answers >= 25, f"only {probe.answers} probes\n{report()}"
            assert not probe.failures, f"/healthz failed: {probe.failures[:10]}\n{report()}"
            assert main_processes(root)["web"].pid == before["web"].pid

            # Ctrl-C: supervisord stops every program, each whole process group.
            started = {p for p in seen if p.is_running()}
            root.send_signal(signal.SIGINT)
            run.wait(timeout=90)
            psutil.wait_procs(list(started), timeout=10)
            left = [p for p in started if p.is_running()]
            assert not left, f"still running after Ctrl-C: {left}\n{report()}"
        finally:
            probe.stop()
            with suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            for proc in seen:
                with suppress(psutil.Error):
                    proc.kill()
            with suppress(subprocess.TimeoutExpired):
                run.wait(timeout=10)


HEALTHCHECK = ROOT / "deploy" / "healthcheck.py"


def healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``deploy/healthcheck.py *args`` as the systemd units do."""
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=60
    )


@contextmanager
def healthz_server(status: int, *, port: int = 0, delay_s: float = 0) -> Iterator[str]:
    """A server answering ``status`` to every GET, started after ``delay_s`` in a thread;
    yields its ``/healthz`` URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    port = port or free_port()
    holder: list[ThreadingHTTPServer] = []

    def serve() -> None:
        time.sleep(delay_s)
        holder.append(ThreadingHTTPServer(("127.0.0.1", port), Handler))
        holder[0].serve_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/healthz"
    finally:
        deadline = time.monotonic() + delay_s + 5
        while not holder and time.monotonic() < deadline:
            time.sleep(0.05)
        if holder:
            holder[0].shutdown()
            holder[0].server_close()


def test_healthcheck_tells_healthy_unhealthy_and_down_apart() -> None:
    with healthz_server(200) as url:
        assert healthcheck(url).returncode == 0
    with healthz_server(503) as url:
        assert healthcheck(url).returncode == 1  # alive, says the database or Redis is away
        assert healthcheck("--up", url).returncode == 0  # alive is all --up asks
    down = f"http://127.0.0.1:{free_port()}/healthz"
    done = healthcheck("--up", down)
    assert done.returncode == 2, done.stderr
    assert "no answer" in done.stderr


def test_healthcheck_wait_returns_once_the_server_answers() -> None:
    port = free_port()
    with healthz_server(503, port=port, delay_s=2) as url:
        started = time.monotonic()
        done = healthcheck("--up", "--wait", "30", url)
        assert done.returncode == 0, done.stderr
        assert 1.5 <= time.monotonic() - started < 20
    started = time.monotonic()
    assert healthcheck("--wait", "1.5", f"http://127.0.0.1:{free_port()}/healthz").returncode == 2
    assert time.monotonic() - started >= 1.5


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is missing")
def test_systemd_units_verify(tmp_path: Path) -> None:
    """``systemd-analyze verify`` accepts every unit of deploy/systemd/, with /opt/halfmoon read
    as this checkout and the environment file as the example one."""
    env_file = tmp_path / "halfmoon.env"
    env_file.write_text((ROOT / "deploy/systemd/halfmoon.env.example").read_text())
    units = []
    for unit in sorted((ROOT / "deploy" / "systemd").glob("halfmoon*.*")):
        if unit.suffix not in (".service", ".timer", ".target"):
            continue
        text = unit.read_text().replace("/etc/halfmoon/halfmoon.env", str(env_file))
        (tmp_path / unit.name).write_text(text.replace("/opt/halfmoon", str(ROOT)))
        units.append(str(tmp_path / unit.name))
    assert len(units) == 10
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"},
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr

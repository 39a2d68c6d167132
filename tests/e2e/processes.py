"""Real broker processes for the end-to-end tests: web servers (``python -m halfmoon.web``: uvicorn,
ASGI, HTTP and websockets), a Celery worker and Celery beat, each in its own process group with its own log file, on a database and
a Redis database of the test's own.

- ``broker_env``: the environment of those processes (production settings, ``DATABASE_URL``,
  ``REDIS_URL``, ``HALFMOON_VAR_DIR``, extra broker settings).
- ``manage``: run ``manage.py`` with that environment and return its output.
- ``Stack``: start processes, wait for them, report their logs, stop them (whole groups);
  ``Stack.start_broker`` starts the quick start's web, worker, beat and gRPC server and waits
  until web, worker and gRPC server are up (``Stack.grpc_endpoint``: the gRPC server's address).
- ``pg_database``: a fresh PostgreSQL database on the tests' server (``PG_ADMIN_URL``), dropped
  afterwards (``tests.e2e.session.migrated_database``: one already migrated).
- ``free_port``: a port of this worker's ``PORTS`` (18000-18049 outside xdist) nothing listens on.
- ``BinRun``: ``bin/run --no-setup`` started as a user starts it, its process tree watched,
  stopped with Ctrl-C.
- ``program_of`` / ``main_processes``: the quick start's programs (web, worker, beat,
  pipeline) found in a process tree by their command lines.
- ``chaos_run``: ``bench/chaos.py`` run to its last line, the figures read off it.
- ``chromium_launch``: Debian's Chromium (``/usr/bin/chromium``) driven by Playwright, which
  never downloads a browser of its own; ``console_sign_in``: the console's sign-in form.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import httpx
import psutil
import psycopg

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

ROOT = Path(__file__).resolve().parents[2]
_TESTS_DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
PG_ADMIN_URL = "postgresql://" + _TESTS_DATABASE_URL.partition("://")[2]
"""The tests' PostgreSQL server (``DATABASE_URL``, as halfmoon.settings_test and bin/test set
it: the machine's on 5432, or bin/test's embedded one), its maintenance database."""


def database_url(name: str, scheme: str = "postgres") -> str:
    """The URL of database ``name`` on the tests' PostgreSQL server (``PG_ADMIN_URL``'s host,
    port and user)."""
    return urllib.parse.urlsplit(PG_ADMIN_URL)._replace(scheme=scheme, path=f"/{name}").geturl()


_WORKER_INDEX = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_PORT_BASE = int(os.environ.get("HALFMOON_TEST_PORT_BASE", "18000"))
PORTS = range(_PORT_BASE + 400 * _WORKER_INDEX, _PORT_BASE + 50 + 400 * _WORKER_INDEX)
"""The e2e ports of this pytest-xdist worker (and of what it starts): 18000-18049 for ``gw0``
and outside xdist, 18400-18449 for ``gw1``, and so on, so two workers never race for one
(``HALFMOON_TEST_PORT_BASE`` moves 18000, for two test runs on one machine)."""
STARTUP_TIMEOUT_S = 60
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = (
    f"{CHROMIUM} is missing: the browser tests and bench/console_latency.py drive Debian's "
    "Chromium; install it with `apt-get install -y chromium`"
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


# The ports this process handed out last: a caller that takes several before it starts any
# server on them (bench/chaos.py: a PostgreSQL, a Redis and the broker) must get distinct ones.
_HANDED_OUT: deque[int] = deque(maxlen=8)


def free_port() -> int:
    """A port of ``PORTS`` nobody listens on and not among the last 8 this process handed
    out (tried in random order, so parallel runs rarely pick the same one)."""
    candidates = [port for port in PORTS if port not in _HANDED_OUT]
    for port in random.sample(candidates, len(candidates)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.append(port)
        return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of the log ``path`` ("(no log)" when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


E2E_SECRET_KEY = "halfmoon-e2e-key-not-secret"
"""The secret key of the broker processes the e2e tests start (``DJANGO_DEBUG`` is off there,
so ``halfmoon.security`` wants a key of their own)."""


def broker_env(
    *, database_url: str, redis_url: str, var_dir: Path, settings: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of the broker's processes: this one's without its ``HALFMOON_*``,
    ``CELERY_*`` and ``DJANGO_*`` variables, plus production settings (``halfmoon.settings``,
    ``DJANGO_DEBUG`` off, ``E2E_SECRET_KEY``), the given database, Redis and var directory
    (static files), then ``settings`` (broker settings, log level, pool sizes) on top."""
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("HALFMOON_", "CELERY_", "DJANGO_"))
        },
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
        "DJANGO_SECRET_KEY": E2E_SECRET_KEY,
        "HALFMOON_VAR_DIR": str(var_dir),
        "PYTHONUNBUFFERED": "1",
        **(settings or {}),
    }


def manage(env: dict[str, str], *args: str, timeout_s: float = 120, cwd: Path = ROOT) -> str:
    """Run ``manage.py *args`` with ``env`` in ``cwd`` (the checkout, or a copy of it); return
    its stdout.

    Raises:
        AssertionError: it exited non-zero (with its output).
    """
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


class Stack:
    """The broker's processes, each in its own process group with its own log file."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.args: dict[str, tuple[str, ...]] = {}
        self.envs: dict[str, dict[str, str]] = {}
        self.grpc_endpoint = ""
        """``host:port`` of the gRPC server ``grpc`` (``start_grpc``; "" before)."""

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        """Start ``python *args`` as ``name``, logging to ``<tmp>/<name>.log``, with the stack's
        environment and ``env`` on top."""
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        self.args[name] = args
        self.envs[name] = env or {}
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *args],
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def restart_exited(self, name: str) -> Path | None:
        """Start ``name`` again with its arguments if it has exited, as supervisord's
        ``autorestart`` does in deployment (deploy/supervisord.conf). Returns where its log so
        far was kept (``<name>.<n>.log``), or None if it was running."""
        if self.procs[name].poll() is None:
            return None
        n = 1
        while (kept := self.tmp / f"{name}.{n}.log").exists():
            n += 1
        self.logs[name].rename(kept)
        self.start(name, *self.args[name], env=self.envs[name])
        return kept

    def start_web(self, port: int, processes: int = 1) -> str:
        """Start ``processes`` web servers as deploy/supervisord.conf does (``python -m
        halfmoon.web``, each its own socket on ``port``): ``web``, ``web2``, ...; wait until
        ``/healthz`` answers. Returns the base URL."""
        url = f"http://127.0.0.1:{port}"
        for n in range(1, processes + 1):
            name = "web" if n == 1 else f"web{n}"
            self.start(name, "-m", "halfmoon.web", "--host", "127.0.0.1", "--port", str(port))
        self.wait_until(f"{url}/healthz", lambda: healthy(url))
        return url

    def web_logs(self) -> str:
        """The logs of every web process started (``start_web``), one after the other."""
        return "\n".join(
            log.read_text(errors="replace")
            for name, log in self.logs.items()
            if name == "web" or (name.startswith("web") and name[3:].isdigit())
        )

    def start_grpc(
        self, port: int, *, name: str = "grpc", env: dict[str, str] | None = None
    ) -> str:
        """Start a gRPC server as deploy/supervisord.conf does (``python -m halfmoon.grpc --host
        127.0.0.1 --port <port>``) as ``name``, with ``env`` on top of the stack's environment
        (e.g. ``HALFMOON_GRPC_ENDPOINT``); wait until it completes an HTTP/2 handshake. Returns
        its address (``127.0.0.1:<port>``), which becomes ``grpc_endpoint`` when ``name`` is
        ``grpc`` (the broker's own; other names are extra servers a test sets up)."""
        endpoint = f"127.0.0.1:{port}"
        self.start(name, "-m", "halfmoon.grpc", "--host", "127.0.0.1", "--port", str(port), env=env)
        self.wait_until(f"the gRPC server {name} at {endpoint}", lambda: grpc_ready(endpoint))
        if name == "grpc":
            self.grpc_endpoint = endpoint
        return endpoint

    def start_broker(self, port: int, *, web_workers: int = 2, grpc_port: int | None = None) -> str:
        """Start the quick start's processes (deploy/supervisord.conf) directly: ``web_workers``
        web servers on ``port`` (``start_web``), ``worker`` (Celery, prefork, 2 processes),
        ``beat`` and the gRPC server ``grpc`` on ``grpc_port`` (a free port when None:
        ``start_grpc``); wait until ``/healthz`` answers, the worker is ready and the gRPC
        server accepts connections. Returns the base URL; the gRPC server's address is
        ``grpc_endpoint``."""
        url = self.start_web(port, web_workers)
        self.start_grpc(grpc_port or free_port())
        self.start(
            "worker", "-m", "celery", "-A", "tasks", "worker", "--concurrency", "2",
            "--pool", "prefork", "-l", "info",
        )  # fmt: skip
        self.start(
            "beat", "-m", "celery", "-A", "tasks", "beat", "-l", "info",
            "-s", str(self.tmp / "celerybeat-schedule"),
        )  # fmt: skip
        self.wait_until(
            "the Celery worker",
            lambda: " ready." in self.logs["worker"].read_text(errors="replace"),
        )
        return url

    def report(self) -> str:
        """Each process's exit status and the tail of its log."""
        parts = []
        for name, log in self.logs.items():
            proc = self.procs[name]
            parts.append(f"----- {name} (exit {proc.poll()}) {log}\n{tail(log)}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        """Raises AssertionError (with the logs) if a process has exited."""
        dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
        assert not dead, f"{', '.join(dead)} exited early\n{self.report()}"

    def wait_until(
        self, what: str, predicate: Callable[[], bool], timeout_s: float = STARTUP_TIMEOUT_S
    ) -> None:
        """Poll ``predicate`` every 0.25 s until it is true, while every process lives.

        Raises:
            AssertionError: a process died, or ``timeout_s`` passed (with the logs).
        """
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


class BinRun:
    """``<checkout>/bin/run --no-setup`` in a session of its own (supervisord in the
    foreground), its output in ``log``; every process seen under it is kept for the cleanup."""

    def __init__(
        self, checkout: Path, env: dict[str, str], log: Path, var: Path, logs: tuple[str, ...]
    ) -> None:
        """Start it in ``checkout`` with ``env``; ``report`` shows the tails of ``var/log/<name>.log``
        for each name of ``logs``."""
        self.log = log
        self.var = var
        self.logs = logs
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(checkout / "bin" / "run"), "--no-setup"],
                cwd=checkout,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.root = psutil.Process(self.proc.pid)
        self.seen: set[psutil.Process] = set()

    def report(self) -> str:
        """bin/run's exit status and output's tail, then each program's log tail."""
        parts = [f"----- bin/run (exit {self.proc.poll()})\n{tail(self.log)}"]
        for name in self.logs:
            parts.append(f"----- {name}\n{tail(self.var / 'log' / f'{name}.log', 20)}")
        return "\n".join(parts)

    def look(self) -> None:
        """Add every process now under bin/run to ``seen``."""
        with suppress(psutil.Error):
            self.seen.update(self.root.children(recursive=True))

    def wait_until(self, what: str, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Poll ``predicate`` every 0.25 s until it is true, while bin/run lives.

        Raises:
            AssertionError: bin/run exited, or ``timeout_s`` passed (with ``report``).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"bin/run exited while waiting for {what}\n{self.report()}"
            )
            self.look()
            if predicate():
                return
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}\n{self.report()}")

    def interrupt(self, timeout_s: float = 90) -> None:
        """Ctrl-C (SIGINT to supervisord); returns once bin/run and every process seen under it
        have exited.

        Raises:
            AssertionError: some are still running (with ``report``).
        """
        self.look()
        started = {p for p in self.seen if p.is_running()}
        self.root.send_signal(signal.SIGINT)
        self.proc.wait(timeout=timeout_s)
        psutil.wait_procs(list(started), timeout=10)
        left = [p for p in started if p.is_running()]
        assert not left, f"still running after Ctrl-C: {left}\n{self.report()}"

    def kill(self) -> None:
        """SIGKILL bin/run's session and every process seen under it."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for proc in self.seen:
            with suppress(psutil.Error):
                proc.kill()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def program_of(cmdline: list[str]) -> str | None:
    """Which of the quick start's programs ``cmdline`` runs (``web``, ``worker``, ``beat``,
    ``pipeline``, ``timer``), or None. Only the program itself counts (``python .venv/bin/celery ...`` or
    ``.venv/bin/celery ...``), not a shell that starts it. With ``setproctitle`` installed,
    Celery retitles its processes (``[celeryd: NODE@HOST:MainProcess] ...``, its pool's
    ``[celeryd: NODE@HOST:ForkPoolWorker-1]``, ``[celery beat] ...``): those count too, the
    ``pipeline`` node being the pipeline worker."""
    title = cmdline[0] if cmdline else ""
    if title.startswith("[celery beat]"):
        return "beat"
    if title.startswith("[celeryd: "):
        node = title.removeprefix("[celeryd: ").partition("@")[0]
        return "pipeline" if node == "pipeline" else "worker"
    head = [Path(arg).name for arg in cmdline[:2]]
    if cmdline[1:3] == ["-m", "halfmoon.web"]:
        return "web"
    if cmdline[1:3] == ["-m", "halfmoon.timer"]:
        return "timer"
    if "celery" not in head:
        return None
    if "beat" in cmdline:
        return "beat"
    if "worker" in cmdline:
        return "pipeline" if "pipeline" in cmdline else "worker"
    return None


def main_processes(root: psutil.Process) -> dict[str, psutil.Process]:
    """Each program's main process among ``root``'s descendants: the one whose parent does not
    run the same program (a Celery pool child's parent does). Of several web processes, the
    one with the lowest pid."""
    found: dict[str, psutil.Process] = {}
    for proc in root.children(recursive=True):
        with suppress(psutil.Error):
            name = program_of(proc.cmdline())
            parent = proc.parent()
            main = name and (parent is None or program_of(parent.cmdline()) != name)
            if main and (name not in found or proc.pid < found[name].pid):
                found[name] = proc
    return found


def grpc_ready(endpoint: str, timeout_s: float = 2) -> bool:
    """True when a gRPC channel to ``endpoint`` (``host:port``, plaintext) becomes ready (TCP
    connection and HTTP/2 handshake) within ``timeout_s``."""
    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


def healthy(url: str) -> bool:
    """True when ``<url>/healthz`` answers 200."""
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def worker_database(name: str) -> str:
    """``name`` with this pytest-xdist worker's suffix (``halfmoon_e2e_x_gw1``), so that one
    module's database on two workers (a module that reuses another's fixtures) is two; ``name``
    itself outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"{name}_{worker}" if worker else name


@contextmanager
def pg_database(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database ``worker_database(name)`` on the tests' server
    (``PG_ADMIN_URL``; dropped first if present, and afterwards); yields its ``postgres://``
    URL."""
    name = worker_database(name)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield database_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def chromium_launch(playwright: Playwright) -> Browser:
    """Debian's headless Chromium (``CHROMIUM``) under Playwright, with no sandbox (containers),
    no GPU and none of its background network traffic.

    Raises:
        FileNotFoundError: Chromium is not installed (the message says how to install it).
    """
    if not CHROMIUM.exists():
        raise FileNotFoundError(CHROMIUM_MISSING)
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def console_sign_in(page: Page, url: str, username: str, password: str) -> None:
    """Open ``url``'s root as an anonymous user, which leads to the console's sign-in form
    (Django's ``username`` and ``password`` fields), and sign in; returns once the browser has
    left the sign-in page."""
    page.goto(f"{url}/")
    page.locator('input[name="username"]').fill(username)
    page.locator('input[name="password"]').fill(password)
    page.locator('form:has(input[name="password"]) [type="submit"]').click()
    page.wait_for_url(lambda current: "/console/login/" not in current)


@contextmanager
def spark_standalone_cluster(directory: Path, *, workers: int = 2) -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers (1 core, 1 GiB each) on this machine,
    started by ``bin/spark-cluster`` (the pyspark package's own ``spark-class``) on a free
    port, logs under ``directory``; yields the master URL and stops them all on exit."""
    port = free_port()
    env = {
        **os.environ,
        "HALFMOON_SPARK_MASTER_PORT": str(port),
        "HALFMOON_SPARK_DIR": str(directory),
        "HALFMOON_SPARK_WORKERS": str(workers),
    }
    script = ROOT / "bin" / "spark-cluster"
    try:
        started = subprocess.run(
            [str(script), "start"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stdout + started.stderr
        yield f"spark://127.0.0.1:{port}"
    finally:
        subprocess.run([str(script), "stop"], cwd=ROOT, env=env, timeout=60, check=False)


CHAOS_LAST_LINE = re.compile(
    r"^rounds=(?P<rounds>\d+) acked=(?P<acked>\d+) lost=(?P<lost>\d+) doubled=(?P<doubled>\d+) "
    r"rebuild_diffs=(?P<rebuild_diffs>\d+) api_5xx=(?P<api_5xx>\d+)"
    r"(?: failover_p50_s=(?P<failover_p50_s>[\d.]+) failover_max_s=(?P<failover_max_s>[\d.]+))?$"
)


def chaos_run(directory: Path, *args: str) -> tuple[dict[str, float], int, str]:
    """Run ``bench/chaos.py *args --dir <directory>/chaos`` (at most 20 minutes); returns the
    figures of its last line (``CHAOS_LAST_LINE``: rounds, acked, lost, ... and, with
    ``--failover``, failover_p50_s and failover_max_s), its exit status and the tail of its
    output for an assertion's message.

    Raises:
        AssertionError: it printed no such last line."""
    done = subprocess.run(
        [sys.executable, "bench/chaos.py", *args, "--dir", str(directory / "chaos")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    output = done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    found = CHAOS_LAST_LINE.match(lines[-1]) if lines else None
    assert found, output
    figures = {name: float(value) for name, value in found.groupdict().items() if value}
    return figures, done.returncode, output

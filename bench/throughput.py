"""Transactional-send throughput of Halfmoon against the ceilings measured in the same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_bench \\
        .venv/bin/python bench/throughput.py [--duration 20] [--warmup 3] [--connections 32]
    .venv/bin/python bench/throughput.py --serving-compare   # Halfmoon under each server

1. Halfmoon per request: half message + commit (= one transaction) per second through the HTTP
   API, served as production serves it (2 web processes, ``python -m halfmoon.web``: uvicorn, a
   ``SO_REUSEPORT`` socket each, the views on Django's WSGI handler in a thread pool, Django's
   psycopg pool), driven
   by ``wrk -s bench/tx.lua``.
2. Halfmoon in batches: ``POST /api/v1/transactions/batch`` of 32 half messages, then
   ``POST /api/v1/transactions/end-batch`` committing them (``bench/batch.lua``), same server;
   messages per second (one message = one half in a batch + its end in an end-batch).
3. Bare Django (``bench/bare``): two plain Django views doing only a transaction's two writes,
   served by gunicorn, 2 sync workers, ``CONN_MAX_AGE`` persistent connections (the fastest
   standard serving measured for it), driven by tx.lua (two requests per transaction).
4. RabbitMQ: 32 publishers (pika, one connection each), durable queue, persistent 1 KB
   messages, one publish + ``tx.commit`` per transaction.
5. PostgreSQL: ``pgbench`` inserting one 1 KB row per transaction.

After phases 1-2 the bench checks with SQL that every committed transaction was delivered exactly
once on its real topic and nothing else was; after phase 4 that the queue holds exactly the
committed messages. ``--serving-compare`` instead measures Halfmoon per request under uvicorn
(ASGI, pool), gunicorn sync (WSGI, ``HALFMOON_SERVER=wsgi``, ``CONN_MAX_AGE``) and granian when
installed.

Every server is started here, in its own process group, and killed on exit (also on an error or
Ctrl-C). ``wrk`` is installed with apt-get when missing and possible. The last line printed is::

    tx_per_s=<n> bare_best_tx_per_s=<n> batch_msgs_per_s=<n> rabbitmq_tx_per_s=<n> \
ratio_bare=<r> ratio_rabbitmq=<r>

See bench/README.md for what the figures mean.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.util
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
LOG_DIR = ROOT / "var" / "bench"
LUA_SCRIPT = BENCH_DIR / "tx.lua"
BATCH_LUA_SCRIPT = BENCH_DIR / "batch.lua"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_bench"
UVICORN_WORKERS = 2  # also the gunicorn and granian worker processes
WRK_TIMEOUT = "10s"
# A batch of 32 takes seconds when 32 of them queue on 2 CPUs; wrk must not drop them at 10 s.
WRK_BATCH_TIMEOUT = "60s"
TOPIC, GROUP = "BenchTopic", "BenchGroup"
BATCH_TOPIC = "BenchBatchTopic"  # the batch phase's real topic, verified on its own
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
RABBITMQ_QUEUE = "halfmoon_bench_tx"


# --- Child processes ----------------------------------------------------------------------------


class Children:
    """Every process this bench starts, each the leader of its own process group."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []

    def start(
        self,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        cwd: Path = ROOT,
        capture: bool = False,
    ) -> subprocess.Popen:
        """Start ``cmd`` in a new session (its own process group); stdout and stderr go to
        ``log`` (or pipes when ``capture``)."""
        if capture:
            out, err = subprocess.PIPE, subprocess.PIPE
        else:
            handle = open(log or os.devnull, "ab")  # noqa: SIM115 - owned by the child
            out, err = handle, subprocess.STDOUT
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=capture,
        )
        if not capture:
            handle.close()
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = 10.0) -> None:
        """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace`` s."""
        if proc not in self._procs:
            return
        self._procs.remove(proc)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not _signal_group(proc, sig) or _wait_group(proc, wait):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)

    def stop_all(self) -> None:
        """Stop every process still running, newest first."""
        for proc in reversed(list(self._procs)):
            self.stop(proc, grace=5.0)


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``proc``; False if the group is gone."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_group(proc: subprocess.Popen, seconds: float) -> bool:
    """Wait until ``proc`` (reaped) and every other member of its group are gone."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


CHILDREN = Children()
atexit.register(CHILDREN.stop_all)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run(cmd: list[str], *, env: dict[str, str], timeout: float = 300.0) -> str:
    """Run ``cmd`` to completion in its own process group; return its stdout.

    Raises:
        RuntimeError: it failed (its output is in the message).
    """
    proc = CHILDREN.start(cmd, env=env, capture=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        CHILDREN.stop(proc, grace=2.0)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stdout}\n{stderr}")
    return stdout


# --- Databases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pg:
    """The PostgreSQL server of ``DATABASE_URL`` and the bench's database name on it."""

    url: str
    host: str
    port: int
    user: str
    password: str
    dbname: str

    @classmethod
    def parse(cls, url: str) -> Pg:
        """Read a ``postgres://user:password@host:port/dbname`` URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql", "pgsql"):
            raise SystemExit(f"DATABASE_URL must be a PostgreSQL URL, not {url!r}")
        dbname = unquote(parts.path.lstrip("/")) or "halfmoon_bench"
        return cls(
            url=url,
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
            dbname=dbname,
        )

    def url_for(self, dbname: str) -> str:
        """The same URL naming database ``dbname``."""
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, ""))

    def connect(self, dbname: str) -> psycopg.Connection:
        """An autocommit connection to ``dbname``."""
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=dbname,
            autocommit=True,
        )

    def recreate(self, dbname: str) -> None:
        """Drop (disconnecting its clients) and create database ``dbname``: a copy of
        ``$HALFMOON_BENCH_TEMPLATE`` when that names a migrated database (the smoke tests: the
        bench's ``migrate`` then has nothing to do), else empty."""
        with self.connect("postgres") as conn:
            database_recreate(conn, dbname)


def database_recreate(admin: psycopg.Connection, dbname: str) -> None:
    """On the autocommit connection ``admin``, drop ``dbname`` (disconnecting its clients) and
    create it, from ``$HALFMOON_BENCH_TEMPLATE`` when set (see ``Pg.recreate``)."""
    name = sql.Identifier(dbname)
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
    template = os.environ.get("HALFMOON_BENCH_TEMPLATE")
    if template:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(name, sql.Identifier(template))
        )
    else:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(name))


# --- HTTP servers and wrk -----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PORT_RANGE = range(18200, 18250)  # the fixed ports of scan_cost.py and op_ratio.py


def pick_port(wanted: int | None) -> int:
    """``wanted``, or the first port of 18200-18249 nothing listens on."""
    for port in [wanted] if wanted else PORT_RANGE:
        with socket.socket() as sock:
            # As uvicorn binds: a port whose old connections are in TIME_WAIT is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port in {wanted or '18200-18249'}")


def wait_http(
    port: int, path: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0
) -> None:
    """Wait until the server on ``port`` answers ``path`` with any HTTP status.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout`` (with its log's tail).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"server on port {port} did not start; {log}:\n{tail}")


def start_uvicorn(app: str, env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """Serve ``app`` as production does: uvicorn, 2 workers, no access log, level warning."""
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--workers",
        str(UVICORN_WORKERS),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    log.write_text("")
    return CHILDREN.start(cmd, env=env, log=log)


def start_web(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """Serve Halfmoon as production does (deploy/supervisord.conf ``web``): ``UVICORN_WORKERS``
    web processes (``python -m halfmoon.web``: uvicorn, each its own ``SO_REUSEPORT`` socket on
    ``port``), started by one shell that waits for them, so that the returned process leads
    their process group (stopped together) and its children are the web processes
    (``child_pids``)."""
    one = shlex.join(
        [sys.executable, "-m", "halfmoon.web", "--host", "127.0.0.1", "--port", str(port)]
    )
    script = " ".join([f"{one} &"] * UVICORN_WORKERS) + " wait"
    log.write_text("")
    return CHILDREN.start(["/bin/sh", "-c", script], env=env, log=log)


def start_gunicorn(app: str, env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """Serve WSGI ``app`` with gunicorn: 2 sync workers (one request at a time each), no access
    log, level warning. ``app`` may be a factory call (``module:function()``)."""
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--workers",
        str(UVICORN_WORKERS),
        "--worker-class",
        "sync",
        "--bind",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
    ]
    log.write_text("")
    return CHILDREN.start(cmd, env=env, log=log)


def start_granian(
    app: str, interface: str, env: dict[str, str], port: int, log: Path
) -> subprocess.Popen:
    """Serve ``app`` with granian, 2 workers, ``interface`` "asgi" or "wsgi" (wsgi: one
    blocking thread per worker, like a gunicorn sync worker), no access log."""
    granian = shutil.which("granian", path=str(Path(sys.executable).parent)) or "granian"
    cmd = [
        granian,
        app,
        "--interface",
        interface,
        "--workers",
        str(UVICORN_WORKERS),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-ws" if interface == "wsgi" else "--ws",
    ]
    if interface == "wsgi":
        cmd += ["--blocking-threads", "1"]
    log.write_text("")
    return CHILDREN.start(cmd, env=env, log=log)


def child_pids(master: int) -> list[int]:
    """Every process whose parent is ``master`` (the workers of gunicorn, granian, uvicorn)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == master:
            found.append(int(entry.name))
    return sorted(found)


def worker_pids(master: int) -> list[int]:
    """The web processes started by ``master``: Halfmoon's (``python -m halfmoon.web``, children
    of ``start_web``'s shell) or uvicorn's workers (multiprocessing children of ``uvicorn
    --workers``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == master and ("spawn_main" in cmdline or "halfmoon.web" in cmdline):
            found.append(int(entry.name))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_pids(pg: Pg, dbname: str) -> list[int]:
    """PostgreSQL backend processes connected to ``dbname`` right now."""
    with pg.connect("postgres") as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [dbname])
        return [row[0] for row in rows]


class CpuMeter:
    """CPU time of the server's processes (master and its children) and of the database's
    backends between two snapshots (a backend that exits in between is missed; the pool and
    persistent connections keep them open)."""

    def __init__(self, pg: Pg, dbname: str, master: int) -> None:
        self.pg, self.dbname, self.master = pg, dbname, master
        self.server: dict[int, float] = {}
        self.database: dict[int, float] = {}

    def _snapshot(self) -> tuple[dict[int, float], dict[int, float]]:
        server = {pid: cpu_seconds(pid) for pid in [self.master, *child_pids(self.master)]}
        database = {pid: cpu_seconds(pid) for pid in backend_pids(self.pg, self.dbname)}
        return server, database

    def start(self) -> None:
        """Take the first snapshot."""
        self.server, self.database = self._snapshot()

    def stop(self) -> tuple[float, float]:
        """CPU seconds used since ``start()``: (server processes, PostgreSQL backends)."""
        server, database = self._snapshot()
        used_server = sum(t - self.server.get(pid, 0.0) for pid, t in server.items())
        used_database = sum(t - self.database.get(pid, 0.0) for pid, t in database.items())
        return used_server, used_database


@dataclass
class WrkResult:
    """What tx.lua's done() reported for one wrk run."""

    committed: int
    created: int
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    socket_errors: dict[str, int]
    statuses: Counter = field(default_factory=Counter)
    create_failed: int = 0
    end_failed: int = 0
    server_cpu_s: float | None = None
    database_cpu_s: float | None = None

    @property
    def tx_per_s(self) -> float:
        """Transactions whose end answered 200, per second of the run."""
        return self.committed / self.duration_s if self.duration_s else 0.0

    @property
    def non_2xx(self) -> int:
        """Responses of either request outside 200-299."""
        return sum(n for key, n in self.statuses.items() if not key.split(":")[1].startswith("2"))

    def describe(self, label: str, unit: str = "tx") -> str:
        """Human-readable lines for this run; ``unit`` names what ``committed`` counts."""
        errors = ", ".join(f"{k} {v}" for k, v in self.socket_errors.items() if v) or "none"
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        return (
            f"{label}: {self.tx_per_s:.1f} {unit}/s ({self.committed} committed in "
            f"{self.duration_s:.2f} s; {self.requests / self.duration_s:.1f} requests/s)\n"
            f"{label}: latency per request p50 {self.p50_ms:.1f} ms, p90 {self.p90_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms, max {self.max_ms:.1f} ms\n"
            f"{label}: non-2xx {self.non_2xx}, socket errors {errors}; statuses {statuses}"
            + self._describe_cpu(label)
        )

    def _describe_cpu(self, label: str) -> str:
        if self.server_cpu_s is None or not self.committed:
            return ""
        per_tx = 1000 * self.server_cpu_s / self.committed
        db_per_tx = 1000 * (self.database_cpu_s or 0.0) / self.committed
        busy = 100 * self.server_cpu_s / self.duration_s
        return (
            f"\n{label}: CPU per transaction: server {per_tx:.2f} ms (server at {busy:.0f}% of "
            f"one CPU), PostgreSQL backends {db_per_tx:.2f} ms"
        )


def wrk_require() -> str:
    """The path of ``wrk``; when it is missing, install Debian's package ``wrk`` with apt-get if
    this process may (root, apt-get present).

    Raises:
        SystemExit: wrk is missing and could not be installed (with what to do).
    """
    found = shutil.which("wrk")
    if found:
        return found
    apt_get = shutil.which("apt-get")
    if apt_get and os.geteuid() == 0:
        print("bench: wrk is missing; apt-get install -y wrk")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = [apt_get, "install", "-y", "wrk"]
        if subprocess.run(install, env=env, capture_output=True, check=False).returncode:
            # A stale package list: refresh it once and try again.
            subprocess.run([apt_get, "update"], env=env, capture_output=True, check=False)
            subprocess.run(install, env=env, capture_output=True, check=False)
        found = shutil.which("wrk")
        if found:
            return found
    raise SystemExit(
        "bench: wrk (the HTTP load generator) is not installed and this process cannot install "
        "it; run `sudo apt-get install wrk` (Debian/Ubuntu) or build it from "
        "https://github.com/wg/wrk, then rerun"
    )


def run_wrk(
    port: int,
    mode: str,
    prefix: str,
    token: str,
    seconds: float,
    connections: int,
    log: Path,
    *,
    batch_size: int = 32,
) -> WrkResult:
    """Drive ``tx.lua`` (mode "halfmoon" or "bare") or, for mode "batch", ``batch.lua`` with
    ``batch_size`` messages per batch, with one connection per wrk thread for ``seconds``.
    msg_ids start with ``prefix``; ``token`` is the access key ("" for bare).

    Returns:
        wrk's counts: for "batch" ``committed`` counts messages (end items COMMITTED).

    Raises:
        RuntimeError: wrk failed or printed no summary.
    """
    if mode == "batch":
        script, script_args = BATCH_LUA_SCRIPT, [prefix, token, str(batch_size)]
    else:
        script, script_args = LUA_SCRIPT, [mode, prefix, token]
    cmd = [
        wrk_require(),
        f"-t{connections}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "--timeout",
        WRK_BATCH_TIMEOUT if mode == "batch" else WRK_TIMEOUT,
        "-s",
        str(script),
        f"http://127.0.0.1:{port}",
        "--",
        *script_args,
    ]
    proc = CHILDREN.start(cmd, capture=True)
    try:
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        CHILDREN.stop(proc, grace=2.0)
    with log.open("a") as handle:
        shown = [("<token>" if token and part == token else part) for part in cmd]
        handle.write(f"$ {' '.join(shown)}\n{out}{err}\n")
    line = next((ln for ln in out.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{out}\n{err}")
    values = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    statuses: Counter = Counter()
    for ln in out.splitlines():
        if ln.startswith("BENCH_STATUS "):
            key, count = ln.split()[1].rsplit("=", 1)
            statuses[key] = int(count)
    return WrkResult(
        committed=values["committed"],
        created=values["created"],
        requests=values["requests"],
        duration_s=values["duration_us"] / 1e6,
        p50_ms=values["p50_us"] / 1e3,
        p90_ms=values["p90_us"] / 1e3,
        p99_ms=values["p99_us"] / 1e3,
        max_ms=values["max_us"] / 1e3,
        socket_errors={k[4:]: v for k, v in values.items() if k.startswith("err_")},
        statuses=statuses,
        create_failed=values.get("create_failed", 0),
        end_failed=values.get("end_failed", 0),
    )


# --- Profiling (py-spy) -------------------------------------------------------------------------

# Own time of a sample goes to the package of its innermost frame (py-spy's short file names).
CATEGORIES = [
    ("Halfmoon's own code (broker, console)", ("broker/", "console/")),
    ("whitenoise", ("whitenoise/",)),
    ("redis, channels_redis", ("redis/", "channels_redis/")),
    ("DRF", ("rest_framework/",)),
    ("ORM query building", ("django/db/models/",)),
    ("Django database layer", ("django/db/",)),
    ("psycopg + pool", ("psycopg/", "psycopg_pool/", "psycopg_binary/")),
    ("Django request handling, middleware, URLs", ("django/",)),
    ("asgiref (sync_to_async threads)", ("asgiref/",)),
    ("uvicorn + HTTP parsing", ("uvicorn/", "httptools/", "h11/")),
    ("channels", ("channels/",)),
    (
        "asyncio, threads, selectors",
        (
            "asyncio/",
            "threading.py",
            "concurrent/",
            "selectors.py",
            "queue.py",
            "contextvars",
            "uvloop/",
        ),
    ),
    ("json", ("json/",)),
]


# Frames whose inclusive time (the frame and everything it calls) is worth a line.
LANDMARKS = [
    "PooledHTTP.__call__ ",
    "WhiteNoiseMiddleware.__call__ ",
    "MiddlewareMixin.__acall__ ",
    "APIView.dispatch ",
    "APIView.initial ",
    "AccessKeyAuthentication.authenticate ",
    "TransactionListCreateView.post ",
    "TransactionEndView.post ",
    "Serializer.is_valid ",
    "Serializer.data ",
    "transaction_prepare ",
    "transaction_end ",
    "message_put ",
    "transaction_changes_publish ",
    "SQLCompiler.as_sql ",
    "SQLInsertCompiler.as_sql ",
    "SQLCompiler.execute_sql ",
    "CursorWrapper._execute ",
    "Cursor.execute ",
    "Atomic.__exit__ ",
    "ConnectionPool.getconn ",
    "ConnectionPool.putconn ",
    "SyncToAsync.__call__ ",
    "AsyncToSync.__call__ ",
    "ThreadPoolExecutor.submit ",
    "Thread.start ",
    "JSONRenderer.render ",
    "JSONParser.parse ",
]


def _category(frame: str) -> str:
    match = re.search(r"\(([^()]*)\)\s*$", frame)
    filename = match.group(1) if match else frame
    for name, prefixes in CATEGORIES:
        if any(p in filename for p in prefixes):
            return name
    return f"other ({filename.split(':')[0]})"


def start_profilers(
    master: int, seconds: float, name: str = "halfmoon"
) -> tuple[list[subprocess.Popen], Path | None]:
    """py-spy one web process into collapsed stacks (var/bench/<name>-profile.txt) and the
    other into an SVG flamegraph (<name>-flamegraph.svg); return the py-spy processes and the
    collapsed-stacks file."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        print("profile: py-spy is not installed (.venv/bin/pip install py-spy); skipped")
        return [], None
    workers = worker_pids(master)
    if not workers:
        print("profile: no web process found; skipped")
        return [], None
    raw = LOG_DIR / f"{name}-profile.txt"
    svg = LOG_DIR / f"{name}-flamegraph.svg"
    jobs = [(workers[0], "raw", raw)]
    if len(workers) > 1:
        jobs.append((workers[1], "flamegraph", svg))
    procs = []
    for pid, fmt, out in jobs:
        cmd = [
            py_spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            "100",
            "--gil",
            "--nonblocking",
            "--nolineno",
            "--format",
            fmt,
            "--output",
            str(out),
        ]
        procs.append(CHILDREN.start(cmd, log=LOG_DIR / f"py-spy-{name}-{fmt}.log"))
    print("profile: py-spy " + "; ".join(f"worker {pid} -> {out}" for pid, _, out in jobs))
    return procs, raw


def report_profile(procs: list[subprocess.Popen], raw: Path | None, top: int = 20) -> None:
    """Wait for py-spy, then print own CPU time by package and the top functions by own time."""
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        CHILDREN.stop(proc, grace=2.0)
    if raw is None or not raw.exists():
        print(f"profile: py-spy wrote no profile; see {LOG_DIR}/py-spy-*-raw.log")
        return
    own: Counter = Counter()
    by_category: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        own[frames[-1]] += int(count)
        by_category[_category(frames[-1])] += int(count)
        for landmark in LANDMARKS:
            if any(frame.startswith(landmark) for frame in frames):
                inclusive[landmark] += int(count)
        total += int(count)
    if not total:
        print("profile: no samples")
        return
    print(
        f"profile: {total} samples holding the GIL in one worker (100 Hz: "
        f"{total / 100:.1f} s of Python CPU); own time by package:"
    )
    for name, count in by_category.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("profile: inclusive time of landmarks (nested, so they do not add up):")
    for landmark in LANDMARKS:
        if inclusive[landmark]:
            print(f"  {100 * inclusive[landmark] / total:5.1f}%  {landmark}")
    print(f"profile: top {top} functions by own time:")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


# --- The measurements ---------------------------------------------------------------------------


def base_env(database_url: str, settings_module: str) -> dict[str, str]:
    """The environment of a Django process of this bench."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=settings_module,
        DATABASE_URL=database_url,
        HALFMOON_LOG_LEVEL="WARNING",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or "halfmoon-bench-key-not-secret",
        PYTHONUNBUFFERED="1",
    )
    return env


SETUP_SHELL = (
    "from broker.services.topology.writes import producer_group_create, topic_create\n"
    f"topic_create(name={TOPIC!r}, queue_nums=4)\n"
    f"topic_create(name={BATCH_TOPIC!r}, queue_nums=4)\n"
    f"producer_group_create(name={GROUP!r}, check_url=None)\n"
)


def verify_halfmoon(
    pg: Pg,
    counted_commits: int,
    connections: int,
    *,
    topic: str = TOPIC,
    in_flight: int | None = None,
) -> bool:
    """Check with SQL that every COMMITTED transaction on ``topic`` was delivered exactly once
    on it and nothing else was; print the figures.

    Args:
        counted_commits: commits the load generator saw answered (warmup included).
        connections: wrk connections; a commit in flight when wrk stops is done by the server
            but not counted, so up to ``in_flight`` (default 2 per connection: one per wrk
            run, the warmup's and the measured one) more may be COMMITTED than counted.
        topic: the real topic of the transactions checked (BenchTopic, or BenchBatchTopic for
            the batch phase).
        in_flight: how many more commits than counted are allowed (a batch phase: one
            end-batch per connection per wrk run).

    Returns:
        True when COMMITTED transactions, delivered messages, their distinct msg_ids and the
        topic's queue offsets are one number, no delivery lacks a commit, no commit lacks a
        delivery, and that number is within the counted range.
    """
    slack = 2 * connections if in_flight is None else in_flight
    with pg.connect(pg.dbname) as conn:
        # Tables filled seconds ago have no statistics until autovacuum gets to them: planned
        # blind, the anti-joins below ran a nested loop over the topic's index (minutes for a
        # batch phase's 35,000 transactions). ANALYZE first.
        conn.execute("ANALYZE broker_transaction, broker_message")
        committed = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'COMMITTED'",
            [topic],
        ).fetchone()[0]
        prepared = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'PREPARED'",
            [topic],
        ).fetchone()[0]
        delivered, distinct_ids = conn.execute(
            "SELECT count(*), count(DISTINCT msg_id) FROM broker_message WHERE topic = %s",
            [topic],
        ).fetchone()
        orphans = conn.execute(
            "SELECT count(*) FROM broker_message m WHERE m.topic = %s AND NOT EXISTS ("
            " SELECT 1 FROM broker_transaction t WHERE t.transaction_id = m.msg_id"
            " AND t.topic = m.topic AND t.state = 'COMMITTED')",
            [topic],
        ).fetchone()[0]
        undelivered = conn.execute(
            "SELECT count(*) FROM broker_transaction t WHERE t.topic = %s"
            " AND t.state = 'COMMITTED' AND NOT EXISTS (SELECT 1 FROM broker_message m"
            " WHERE m.topic = t.topic AND m.msg_id = t.transaction_id)",
            [topic],
        ).fetchone()[0]
        queue_total = conn.execute(
            "SELECT coalesce(sum(max_offset), 0) FROM broker_consumequeue WHERE topic = %s",
            [topic],
        ).fetchone()[0]
    ok = (
        committed == delivered == distinct_ids == queue_total
        and orphans == 0
        and undelivered == 0
        and counted_commits <= committed <= counted_commits + slack
    )
    print(
        f"halfmoon verify {topic}: COMMITTED transactions {committed} (wrk counted "
        f"{counted_commits}), delivered messages {delivered} ({distinct_ids} distinct msg_ids, "
        f"queue offsets {queue_total}), delivered without a commit {orphans}, committed without "
        f"a delivery {undelivered}, still PREPARED {prepared}: {'OK' if ok else 'MISMATCH'}"
    )
    return ok


def run_inprocess(target: str, env: dict[str, str], token: str, repeat: int) -> None:
    """Print bench/inprocess.py's figures (queries and CPU per transaction, one thread)."""
    if repeat <= 0:
        return
    cmd = [sys.executable, str(BENCH_DIR / "inprocess.py"), target, "--repeat", str(repeat)]
    if token:
        cmd += ["--token", token]
    label = "halfmoon" if target == "halfmoon" else "bare django"
    try:
        out = run(cmd, env=env)
    except RuntimeError as exc:
        print(f"{label}: in-process measurement failed: {exc}")
        return
    for line in out.strip().splitlines():
        print(f"{label} {line}")


def broker_database_prepare(pg: Pg, env: dict[str, str]) -> str:
    """Recreate ``pg.dbname``, migrate it, create BenchTopic, BenchBatchTopic and BenchGroup, and
    return the token of a new access key for BenchGroup."""
    pg.recreate(pg.dbname)
    manage = [sys.executable, str(ROOT / "manage.py")]
    run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
    run([*manage, "shell", "-c", SETUP_SHELL], env=env)
    out = run([*manage, "create_access_key", "bench-producer", "--producer-group", GROUP], env=env)
    return out.strip().splitlines()[-1].strip()


# How Halfmoon's API can be served; the first is production's (deploy/supervisord.conf "web").
SERVINGS = {
    "uvicorn": "2 web processes (python -m halfmoon.web: uvicorn, a SO_REUSEPORT socket each), "
    "halfmoon.asgi, Django's psycopg pool",
    "gunicorn-sync": "gunicorn --workers 2 sync, halfmoon.wsgi, HALFMOON_SERVER=wsgi "
    "(CONN_MAX_AGE persistent connections)",
    "granian-wsgi": "granian --workers 2 --interface wsgi --blocking-threads 1, halfmoon.wsgi, "
    "HALFMOON_SERVER=wsgi (CONN_MAX_AGE)",
    "granian-asgi": "granian --workers 2 --interface asgi, halfmoon.asgi, Django's psycopg pool",
}


def start_halfmoon(serving: str, env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """Serve Halfmoon's API as ``serving`` (a key of SERVINGS) says; WSGI servings get
    ``HALFMOON_SERVER=wsgi`` (halfmoon/settings.py: a persistent connection per process, no
    pool)."""
    env = dict(env)
    if serving == "uvicorn":
        return start_web(env, port, log)
    if serving == "gunicorn-sync":
        env["HALFMOON_SERVER"] = "wsgi"
        return start_gunicorn("halfmoon.wsgi:application", env, port, log)
    if serving == "granian-wsgi":
        env["HALFMOON_SERVER"] = "wsgi"
        return start_granian("halfmoon.wsgi:application", "wsgi", env, port, log)
    if serving == "granian-asgi":
        return start_granian("halfmoon.asgi:application", "asgi", env, port, log)
    raise ValueError(f"unknown serving {serving!r}")


@dataclass
class HalfmoonRun:
    """The figures of one Halfmoon server: per request, and (when measured) in batches."""

    per_request: WrkResult
    batch: WrkResult | None
    verified: bool


def measure_halfmoon(
    pg: Pg,
    args: argparse.Namespace,
    *,
    serving: str = "uvicorn",
    batch: bool = True,
    inprocess: bool = True,
) -> HalfmoonRun:
    """Set up the bench database, serve Halfmoon as ``serving``, measure transactions per
    request (tx.lua), then, when ``batch``, messages in batches of ``args.batch_size``
    (batch.lua) on the same server; verify each phase's topic afterwards."""
    label = "halfmoon" if serving == "uvicorn" else f"halfmoon {serving}"
    log = LOG_DIR / f"halfmoon-{serving}.log"
    wrk_log = LOG_DIR / f"halfmoon-{serving}-wrk.log"
    wrk_log.write_text("")
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    t0 = time.monotonic()
    token = broker_database_prepare(pg, env)
    print(f"{label}: database {pg.dbname} recreated and migrated in {time.monotonic() - t0:.1f} s")

    port = free_port()
    server = start_halfmoon(serving, env, port, log)
    batch_warm = batch_result = None
    try:
        wait_http(port, "/healthz", server, log)
        warm = run_wrk(port, "halfmoon", "w", token, args.warmup, args.connections, wrk_log)
        print(
            f"{label}: warmup {args.warmup:g} s, {warm.committed} committed, non-2xx {warm.non_2xx}"
        )
        profile = args.profile and serving == "uvicorn"
        profilers, raw = start_profilers(server.pid, args.duration) if profile else ([], None)
        meter = CpuMeter(pg, pg.dbname, server.pid)
        meter.start()
        result = run_wrk(port, "halfmoon", "b", token, args.duration, args.connections, wrk_log)
        result.server_cpu_s, result.database_cpu_s = meter.stop()
        if profile:
            report_profile(profilers, raw)
        print(result.describe(label))
        if batch:
            size = args.batch_size
            batch_warm = run_wrk(
                port, "batch", "bw", token, args.warmup, args.connections, wrk_log, batch_size=size
            )
            print(
                f"{label} batch: warmup {args.warmup:g} s, {batch_warm.committed} messages "
                f"committed, non-2xx {batch_warm.non_2xx}"
            )
            profilers, raw = (
                start_profilers(server.pid, args.duration, "halfmoon-batch")
                if profile
                else ([], None)
            )
            meter.start()
            batch_result = run_wrk(
                port,
                "batch",
                "bb",
                token,
                args.duration,
                args.connections,
                wrk_log,
                batch_size=size,
            )
            batch_result.server_cpu_s, batch_result.database_cpu_s = meter.stop()
            if profile:
                report_profile(profilers, raw)
            print(batch_result.describe(f"{label} batch of {size}", unit="msg"))
            print(
                f"{label} batch of {size}: {batch_result.requests / batch_result.duration_s:.1f} "
                f"requests/s = batches + end-batches (latency above is per batch request); "
                f"half items not stored {batch_result.create_failed}, end items not COMMITTED "
                f"{batch_result.end_failed}"
            )
    finally:
        CHILDREN.stop(server)
    verified = verify_halfmoon(pg, warm.committed + result.committed, args.connections)
    if batch_result is not None and batch_warm is not None:
        verified &= verify_halfmoon(
            pg,
            batch_warm.committed + batch_result.committed,
            args.connections,
            topic=BATCH_TOPIC,
            in_flight=2 * args.connections * args.batch_size,  # warmup and measured runs
        )
    if inprocess:
        run_inprocess("halfmoon", env, token, args.inprocess)
    return HalfmoonRun(result, batch_result, verified)


BARE_WSGI_SETTINGS = '''"""Written by bench/throughput.py: bench/bare's settings as gunicorn sync workers serve them,
like halfmoon/settings.py with HALFMOON_SERVER=wsgi: one persistent connection per process."""

from bare.settings import *  # noqa: F403

DATABASES["default"]["CONN_MAX_AGE"] = 600  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405
DATABASES["default"].get("OPTIONS", {}).pop("pool", None)  # noqa: F405
'''

BARE_SERVINGS = {
    "gunicorn-sync": "gunicorn --workers 2 sync, CONN_MAX_AGE persistent connections",
    "uvicorn": "uvicorn --workers 2, ASGI, Django's psycopg pool",
}


def measure_bare(pg: Pg, args: argparse.Namespace, serving: str = "gunicorn-sync") -> WrkResult:
    """Serve bench/bare as ``serving`` (gunicorn sync x2 with ``CONN_MAX_AGE``: the fastest
    standard serving measured for it, ~450 tx/s where uvicorn x2 with the pool made ~290; or
    uvicorn x2 with the pool) and drive it with tx.lua as Halfmoon is driven."""
    label = f"bare django {serving}"
    log = LOG_DIR / f"bare-{serving}.log"
    wrk_log = LOG_DIR / f"bare-{serving}-wrk.log"
    wrk_log.write_text("")
    dbname = f"{pg.dbname}_bare"
    pg.recreate(dbname)
    create_sql = _read_constant(BENCH_DIR / "bare" / "models.py", "CREATE_TABLE_SQL")
    with pg.connect(dbname) as conn:
        conn.execute(create_sql)
    env = base_env(pg.url_for(dbname), "bare.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))

    port = free_port()
    if serving == "gunicorn-sync":
        (LOG_DIR / "bare_wsgi_settings.py").write_text(BARE_WSGI_SETTINGS)
        server_env = dict(
            env,
            DJANGO_SETTINGS_MODULE="bare_wsgi_settings",
            HALFMOON_DB_POOL="false",
            PYTHONPATH=os.pathsep.join([str(LOG_DIR), env["PYTHONPATH"]]),
        )
        server = start_gunicorn("django.core.wsgi:get_wsgi_application()", server_env, port, log)
    else:
        server = start_uvicorn("bare.asgi:application", env, port, log)
    try:
        wait_http(port, "/bare/insert", server, log)
        warm = run_wrk(port, "bare", "w", "", args.warmup, args.connections, wrk_log)
        print(
            f"{label}: warmup {args.warmup:g} s, {warm.committed} committed, non-2xx {warm.non_2xx}"
        )
        meter = CpuMeter(pg, dbname, server.pid)
        meter.start()
        result = run_wrk(port, "bare", "b", "", args.duration, args.connections, wrk_log)
        result.server_cpu_s, result.database_cpu_s = meter.stop()
    finally:
        CHILDREN.stop(server)
    print(result.describe(label))
    with pg.connect(dbname) as conn:
        committed = conn.execute("SELECT count(*) FROM bare_row WHERE state = 'COMMITTED'")
        committed = committed.fetchone()[0]
    print(
        f"{label} verify: COMMITTED rows {committed} (wrk counted {warm.committed + result.committed})"
    )
    if args.inprocess and serving == args.bare_servings[0]:
        run_inprocess("bare", env, "", args.inprocess)
    return result


# --- RabbitMQ -----------------------------------------------------------------------------------


def rabbitmq_require(url: str, timeout: float = 60.0) -> None:
    """Make sure a RabbitMQ broker answers at ``url``: if none does, start the local one
    (``service rabbitmq-server start``, else ``rabbitmq-server -detached``; it keeps running
    after the bench, as a system service) and wait for it.

    Raises:
        SystemExit: pika is not installed, or no broker answers within ``timeout`` s.
    """
    try:
        import pika
    except ImportError as exc:
        raise SystemExit("bench: pika is missing: .venv/bin/pip install 'pika>=1.3,<2'") from exc

    def answers() -> bool:
        try:
            pika.BlockingConnection(pika.URLParameters(url)).close()
        except pika.exceptions.AMQPError:
            return False
        return True

    if answers():
        return
    starts = []
    if shutil.which("service"):
        starts.append(["service", "rabbitmq-server", "start"])
    if shutil.which("rabbitmq-server"):
        starts.append(["rabbitmq-server", "-detached"])
    for cmd in starts:
        print(f"rabbitmq: nothing answers at {url}; {' '.join(cmd)}")
        subprocess.run(cmd, capture_output=True, check=False, timeout=120)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if answers():
                return
            time.sleep(1.0)
    raise SystemExit(
        f"bench: no RabbitMQ answers at {url} and it could not be started here; start it "
        "(`rabbitmq-server -detached` or `service rabbitmq-server start`) or set RABBITMQ_URL"
    )


def _rabbitmq_publishers(
    url: str, threads: int, start_at: float, warmup: float, duration: float, results: object
) -> None:
    """One process of the RabbitMQ phase: ``threads`` publishers, each on its own connection,
    publish a persistent 1 KB message then ``tx.commit`` in a loop from ``start_at`` (monotonic
    clock, shared by the processes) for ``warmup + duration`` s. Puts ``(window commits, total
    commits, latencies in s of the window's commits, errors)`` on the ``results`` queue."""
    import pika

    window_from, window_to = start_at + warmup, start_at + warmup + duration
    totals = {"window": 0, "total": 0}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def publisher() -> None:
        window = total = 0
        mine: list[float] = []
        try:
            connection = pika.BlockingConnection(pika.URLParameters(url))
            channel = connection.channel()
            channel.tx_select()
            properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
            body = b"x" * 1024
            while time.monotonic() < start_at:
                time.sleep(0.005)
            while (began := time.monotonic()) < window_to:
                channel.basic_publish("", RABBITMQ_QUEUE, body, properties)
                channel.tx_commit()
                total += 1
                ended = time.monotonic()
                if window_from <= ended <= window_to:
                    window += 1
                    mine.append(ended - began)
            connection.close()
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the phase
            errors.append(f"{type(exc).__name__}: {exc}")
        with lock:
            totals["window"] += window
            totals["total"] += total
            latencies.extend(mine)

    workers = [threading.Thread(target=publisher) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put((totals["window"], totals["total"], latencies, errors))  # type: ignore[attr-defined]


def measure_rabbitmq(args: argparse.Namespace) -> tuple[float, bool]:
    """RabbitMQ's transactional publish: ``args.connections`` publishers (pika, one connection
    each, spread over ``args.rabbitmq_processes`` processes), a durable queue, persistent 1 KB
    messages, one ``basic.publish`` + ``tx.commit`` per transaction. Verifies that the queue then
    holds exactly the committed messages.

    Returns:
        Commits per second of the measured window (after ``args.warmup``), and whether the queue
        held exactly the acknowledged commits with no publisher failing.
    """
    import pika

    url = os.environ.get("RABBITMQ_URL") or DEFAULT_RABBITMQ_URL
    rabbitmq_require(url)
    admin = pika.BlockingConnection(pika.URLParameters(url))
    channel = admin.channel()
    channel.queue_declare(RABBITMQ_QUEUE, durable=True)
    channel.queue_purge(RABBITMQ_QUEUE)

    processes = max(1, min(args.rabbitmq_processes, args.connections))
    per_process = [args.connections // processes] * processes
    for i in range(args.connections % processes):
        per_process[i] += 1
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    start_at = time.monotonic() + 2.0  # time for every publisher to connect first
    procs = [
        context.Process(
            target=_rabbitmq_publishers,
            args=(url, n, start_at, args.warmup, args.duration, results),
            daemon=True,
        )
        for n in per_process
    ]
    for proc in procs:
        proc.start()
    gathered = []
    try:
        for _ in procs:
            gathered.append(results.get(timeout=args.warmup + args.duration + 120))
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
    window = sum(g[0] for g in gathered)
    total = sum(g[1] for g in gathered)
    latencies = sorted(x for g in gathered for x in g[2])
    errors = [e for g in gathered for e in g[3]]
    queued = channel.queue_declare(RABBITMQ_QUEUE, durable=True, passive=True).method.message_count
    channel.queue_delete(RABBITMQ_QUEUE)
    admin.close()

    tps = window / args.duration

    def pct(q: float) -> float:
        if not latencies:
            return 0.0
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    print(
        f"rabbitmq: {tps:.1f} tx/s ({window} publish + tx.commit in {args.duration:g} s; "
        f"{args.connections} publishers in {processes} processes), latency per commit "
        f"p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms"
    )
    ok = queued == total and not errors
    print(
        f"rabbitmq verify: messages in {RABBITMQ_QUEUE} {queued}, commits acknowledged {total}, "
        f"publisher errors {len(errors)}: {'OK' if ok else 'MISMATCH'}"
    )
    for error in sorted(set(errors))[:3]:
        print(f"rabbitmq: publisher error: {error}")
    return tps, ok


def _read_constant(path: Path, name: str) -> str:
    """A string constant of a module, read without importing it (no Django setup needed)."""
    import ast

    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"{name} not in {path}")


PGBENCH_SCRIPT = (
    "INSERT INTO pg_ceiling (body, created_ms) VALUES (convert_to(repeat('x', 1024), 'UTF8'), 0);\n"
)


def run_pgbench(pg: Pg, dbname: str, script: Path, seconds: float, connections: int) -> str:
    """One pgbench run of ``script``; return its output."""
    cmd = [
        shutil.which("pgbench") or "/usr/bin/pgbench",
        "-h",
        pg.host,
        "-p",
        str(pg.port),
        "-U",
        pg.user,
        "-c",
        str(connections),
        "-j",
        "2",
        "-T",
        str(max(1, round(seconds))),
        "-n",
        "-f",
        str(script),
        dbname,
    ]
    env = dict(os.environ)
    if pg.password:
        env["PGPASSWORD"] = pg.password
    return run(cmd, env=env, timeout=seconds + 60)


def measure_pg(pg: Pg, args: argparse.Namespace) -> float:
    """pgbench: one autocommit INSERT of a 1 KB row per transaction; return its tps."""
    dbname = f"{pg.dbname}_pg"
    pg.recreate(dbname)
    with pg.connect(dbname) as conn:
        conn.execute(
            "CREATE TABLE pg_ceiling (id bigserial PRIMARY KEY, body bytea NOT NULL,"
            " created_ms bigint NOT NULL)"
        )
    script = LOG_DIR / "pg_insert.sql"
    script.write_text(PGBENCH_SCRIPT)
    run_pgbench(pg, dbname, script, args.warmup, args.connections)
    out = run_pgbench(pg, dbname, script, args.duration, args.connections)
    (LOG_DIR / "pgbench.log").write_text(out)
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if match is None:
        raise RuntimeError(f"pgbench printed no tps:\n{out}")
    tps = float(match.group(1))
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    print(
        f"postgresql: {tps:.1f} single-row insert transactions/s (pgbench -c {args.connections} "
        f"-j 2, latency average {latency.group(1) if latency else '?'} ms, "
        f"failed {failed.group(1) if failed else '?'})"
    )
    return tps


def serving_compare(pg: Pg, args: argparse.Namespace) -> tuple[dict[str, float], bool]:
    """Halfmoon per request under each serving of SERVINGS (granian's only when it is
    installed), each on a fresh database, verified; print one line per serving.

    Returns:
        transactions/s by serving, and whether every verification passed.
    """
    servings = ["uvicorn", "gunicorn-sync"]
    if importlib.util.find_spec("granian") is not None:
        servings += ["granian-wsgi", "granian-asgi"]
    else:
        print("serving: granian is not installed (.venv/bin/pip install granian); skipped")
    figures: dict[str, float] = {}
    results: dict[str, WrkResult] = {}
    verified = True
    for serving in servings:
        print(f"serving {serving}: {SERVINGS[serving]}")
        try:
            measured = measure_halfmoon(pg, args, serving=serving, batch=False, inprocess=False)
        except RuntimeError as exc:
            print(f"serving {serving}: failed: {exc}")
            verified = False
            continue
        results[serving] = measured.per_request
        figures[serving] = measured.per_request.tx_per_s
        verified &= measured.verified
    print("serving: Halfmoon per request (half + commit), one line per server:")
    for serving, result in results.items():
        cpu = (
            f"{1000 * result.server_cpu_s / result.committed:.2f} ms server CPU/tx"
            if result.server_cpu_s is not None and result.committed
            else "CPU n/a"
        )
        print(
            f"  {serving:14} {result.tx_per_s:8.1f} tx/s  p50 {result.p50_ms:6.1f} ms  "
            f"p99 {result.p99_ms:6.1f} ms  non-2xx {result.non_2xx}  {cpu}"
        )
    return figures, verified


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print the summary line last.

    Returns:
        0, or 1 when a verification found a mismatch (the figures are printed anyway).
    """
    parser = argparse.ArgumentParser(
        description="Halfmoon transactional-send throughput vs bare Django, RabbitMQ and "
        "PostgreSQL."
    )
    parser.add_argument("--duration", type=float, default=20, help="seconds per measurement")
    parser.add_argument(
        "--seconds", type=float, dest="duration", default=argparse.SUPPRESS, help="= --duration"
    )
    parser.add_argument("--warmup", type=float, default=3, help="seconds of uncounted warmup")
    parser.add_argument("--connections", type=int, default=32, help="concurrent producers")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="half messages per batch (and ends per end-batch) in the batch phase",
    )
    parser.add_argument(
        "--bare-servings",
        default="gunicorn-sync",
        help="comma-separated servings of the bare baseline, of "
        f"{','.join(BARE_SERVINGS)}; bare_best_tx_per_s is the best",
    )
    parser.add_argument(
        "--rabbitmq-processes",
        type=int,
        default=4,
        help="processes the RabbitMQ publishers (--connections of them) are spread over",
    )
    parser.add_argument(
        "--inprocess",
        type=int,
        default=100,
        metavar="N",
        help="also time N transactions in one thread without HTTP (bench/inprocess.py); 0: skip",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy one uvicorn worker during each Halfmoon measurement (per request, batch)",
    )
    parser.add_argument(
        "--serving-compare",
        action="store_true",
        help="instead: Halfmoon per request under uvicorn, gunicorn sync and granian",
    )
    args = parser.parse_args(argv)
    if args.duration < 1 or args.warmup < 1 or args.connections < 1:
        parser.error("--duration and --warmup must be >= 1 s, --connections >= 1")
    if not 1 <= args.batch_size <= 128:
        parser.error("--batch-size must be 1..128 (HALFMOON_BATCH_MAX_MESSAGES' default)")
    args.bare_servings = [s.strip() for s in args.bare_servings.split(",") if s.strip()]
    if not args.bare_servings or set(args.bare_servings) - set(BARE_SERVINGS):
        parser.error(f"--bare-servings: a comma-separated list of {', '.join(BARE_SERVINGS)}")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    wrk_require()
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    print(
        f"bench: {args.connections} connections, {args.duration:g} s per measurement after "
        f"{args.warmup:g} s warmup, {UVICORN_WORKERS} server workers, {os.cpu_count()} CPUs, "
        f"PostgreSQL {pg.host}:{pg.port}/{pg.dbname}; logs in {LOG_DIR}"
    )
    if args.serving_compare:
        try:
            figures, verified = serving_compare(pg, args)
        finally:
            CHILDREN.stop_all()
        fastest = max(figures, key=figures.get) if figures else "none"
        print(
            " ".join(f"{name.replace('-', '_')}_tx_per_s={tx:.1f}" for name, tx in figures.items())
            + f" fastest={fastest}"
        )
        return 0 if verified else 1

    try:
        halfmoon = measure_halfmoon(pg, args)
        bare = {serving: measure_bare(pg, args, serving) for serving in args.bare_servings}
        rabbitmq_tx, rabbitmq_ok = measure_rabbitmq(args)
        pg_tps = measure_pg(pg, args)
    finally:
        CHILDREN.stop_all()
    tx = halfmoon.per_request.tx_per_s
    batch_msgs = halfmoon.batch.tx_per_s if halfmoon.batch else 0.0
    bare_best = max(result.tx_per_s for result in bare.values())
    ratio_bare = tx / bare_best if bare_best else 0.0
    ratio_rabbitmq = batch_msgs / rabbitmq_tx if rabbitmq_tx else 0.0
    ratio_pg = tx / (pg_tps / 2) if pg_tps else 0.0
    verified = halfmoon.verified and rabbitmq_ok
    print(
        f"also: pg_ceiling_per_s={pg_tps:.1f} ratio_pg={ratio_pg:.3f} "
        f"batch_vs_per_request={batch_msgs / tx if tx else 0.0:.2f} "
        f"bare_by_serving={','.join(f'{k}:{v.tx_per_s:.1f}' for k, v in bare.items())} "
        f"verified={'OK' if verified else 'MISMATCH'}"
    )
    print(
        f"tx_per_s={tx:.1f} bare_best_tx_per_s={bare_best:.1f} batch_msgs_per_s={batch_msgs:.1f} "
        f"rabbitmq_tx_per_s={rabbitmq_tx:.1f} ratio_bare={ratio_bare:.3f} "
        f"ratio_rabbitmq={ratio_rabbitmq:.3f}"
    )
    return 0 if verified else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)

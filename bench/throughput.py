"""Transactional-send throughput of Halfmoon against two ceilings measured in the same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_bench \\
        .venv/bin/python bench/throughput.py [--duration 20] [--warmup 3] [--connections 32]

1. Halfmoon: half message + commit (= one transaction) per second through the HTTP API, served as
   production serves it (uvicorn, 2 workers, ASGI, Django's psycopg pool), driven by ``wrk``.
2. Bare Django (``bench/bare``): the same serving and pool, two plain Django views doing only a
   transaction's two writes, driven the same way (two requests per transaction).
3. PostgreSQL: ``pgbench`` inserting one 1 KB row per transaction.

Every server is started here, in its own process group, and killed on exit (also on an error or
Ctrl-C). The last line printed is::

    tx_per_s=<n> bare_django_tx_per_s=<n> pg_ceiling_per_s=<n> ratio_bare=<r> ratio_pg=<r>

See bench/README.md for what the figures mean.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
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
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_bench"
UVICORN_WORKERS = 2
WRK_TIMEOUT = "10s"
TOPIC, GROUP = "BenchTopic", "BenchGroup"


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
        """Drop (disconnecting its clients) and create database ``dbname``."""
        with self.connect("postgres") as conn:
            name = sql.Identifier(dbname)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


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


def worker_pids(master: int) -> list[int]:
    """The uvicorn worker processes (multiprocessing children) of ``master``."""
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
        if ppid == master and "spawn_main" in cmdline:
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
    """CPU time of the uvicorn processes and of the database's backends between two snapshots
    (a backend that exits in between is missed; the pool keeps them open)."""

    def __init__(self, pg: Pg, dbname: str, master: int) -> None:
        self.pg, self.dbname, self.master = pg, dbname, master
        self.server: dict[int, float] = {}
        self.database: dict[int, float] = {}

    def _snapshot(self) -> tuple[dict[int, float], dict[int, float]]:
        server = {pid: cpu_seconds(pid) for pid in [self.master, *worker_pids(self.master)]}
        database = {pid: cpu_seconds(pid) for pid in backend_pids(self.pg, self.dbname)}
        return server, database

    def start(self) -> None:
        """Take the first snapshot."""
        self.server, self.database = self._snapshot()

    def stop(self) -> tuple[float, float]:
        """CPU seconds used since ``start()``: (uvicorn processes, PostgreSQL backends)."""
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

    def describe(self, label: str) -> str:
        """Human-readable lines for this run."""
        errors = ", ".join(f"{k} {v}" for k, v in self.socket_errors.items() if v) or "none"
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        return (
            f"{label}: {self.tx_per_s:.1f} tx/s ({self.committed} committed in "
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
            f"\n{label}: CPU per transaction: server {per_tx:.2f} ms (uvicorn at {busy:.0f}% of "
            f"one CPU), PostgreSQL backends {db_per_tx:.2f} ms"
        )


def run_wrk(
    port: int, mode: str, prefix: str, token: str, seconds: float, connections: int, log: Path
) -> WrkResult:
    """Drive ``tx.lua`` with one connection per wrk thread for ``seconds``.

    Raises:
        RuntimeError: wrk failed or printed no summary.
    """
    cmd = [
        shutil.which("wrk") or "/usr/bin/wrk",
        f"-t{connections}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "--timeout",
        WRK_TIMEOUT,
        "-s",
        str(LUA_SCRIPT),
        f"http://127.0.0.1:{port}",
        "--",
        mode,
        prefix,
        token,
    ]
    proc = CHILDREN.start(cmd, capture=True)
    try:
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        CHILDREN.stop(proc, grace=2.0)
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(cmd[:-1])} <token>\n{out}{err}\n")
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
    "ASGIHandler.__call__ ",
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
    "transaction_change_publish ",
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


def start_profilers(master: int, seconds: float) -> tuple[list[subprocess.Popen], Path | None]:
    """py-spy one uvicorn worker into collapsed stacks (var/bench/halfmoon-profile.txt) and the
    other into an SVG flamegraph; return the py-spy processes and the collapsed-stacks file."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        print("profile: py-spy is not installed (.venv/bin/pip install py-spy); skipped")
        return [], None
    workers = worker_pids(master)
    if not workers:
        print("profile: no uvicorn worker found; skipped")
        return [], None
    raw = LOG_DIR / "halfmoon-profile.txt"
    svg = LOG_DIR / "halfmoon-flamegraph.svg"
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
        procs.append(CHILDREN.start(cmd, log=LOG_DIR / f"py-spy-{fmt}.log"))
    print("profile: py-spy " + "; ".join(f"worker {pid} -> {out}" for pid, _, out in jobs))
    return procs, raw


def report_profile(procs: list[subprocess.Popen], raw: Path | None, top: int = 20) -> None:
    """Wait for py-spy, then print own CPU time by package and the top functions by own time."""
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        CHILDREN.stop(proc, grace=2.0)
    if raw is None or not raw.exists():
        print("profile: py-spy wrote no profile; see var/bench/py-spy-raw.log")
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


# --- The three measurements ---------------------------------------------------------------------


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
    "from broker.services.admin import producer_group_create, topic_create\n"
    f"topic_create(name={TOPIC!r}, queue_nums=4)\n"
    f"producer_group_create(name={GROUP!r}, check_url=None)\n"
)


def verify_halfmoon(pg: Pg, counted_commits: int, connections: int) -> bool:
    """Check with SQL that every COMMITTED transaction on BenchTopic was delivered exactly once
    and nothing else was; print the figures. Returns True when they match."""
    with pg.connect(pg.dbname) as conn:
        committed = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'COMMITTED'",
            [TOPIC],
        ).fetchone()[0]
        prepared = conn.execute(
            "SELECT count(*) FROM broker_transaction WHERE topic = %s AND state = 'PREPARED'",
            [TOPIC],
        ).fetchone()[0]
        delivered, distinct_ids = conn.execute(
            "SELECT count(*), count(DISTINCT msg_id) FROM broker_message WHERE topic = %s",
            [TOPIC],
        ).fetchone()
        orphans = conn.execute(
            "SELECT count(*) FROM broker_message m WHERE m.topic = %s AND NOT EXISTS ("
            " SELECT 1 FROM broker_transaction t WHERE t.transaction_id = m.msg_id"
            " AND t.state = 'COMMITTED')",
            [TOPIC],
        ).fetchone()[0]
        undelivered = conn.execute(
            "SELECT count(*) FROM broker_transaction t WHERE t.topic = %s"
            " AND t.state = 'COMMITTED' AND NOT EXISTS (SELECT 1 FROM broker_message m"
            " WHERE m.topic = t.topic AND m.msg_id = t.transaction_id)",
            [TOPIC],
        ).fetchone()[0]
        queue_total = conn.execute(
            "SELECT coalesce(sum(max_offset), 0) FROM broker_consumequeue WHERE topic = %s",
            [TOPIC],
        ).fetchone()[0]
    # A commit in flight when wrk stops is done by the server but not counted by wrk.
    ok = (
        committed == delivered == distinct_ids == queue_total
        and orphans == 0
        and undelivered == 0
        and counted_commits <= committed <= counted_commits + 2 * connections
    )
    print(
        f"halfmoon verify: COMMITTED transactions {committed} (wrk counted {counted_commits}), "
        f"delivered messages on {TOPIC} {delivered} ({distinct_ids} distinct msg_ids, "
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
    """Recreate ``pg.dbname``, migrate it, create BenchTopic and BenchGroup, and return the token
    of a new access key for BenchGroup."""
    pg.recreate(pg.dbname)
    manage = [sys.executable, str(ROOT / "manage.py")]
    run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
    run([*manage, "shell", "-c", SETUP_SHELL], env=env)
    out = run([*manage, "create_access_key", "bench-producer", "--producer-group", GROUP], env=env)
    return out.strip().splitlines()[-1].strip()


def measure_halfmoon(pg: Pg, args: argparse.Namespace) -> WrkResult:
    """Set up the bench database, serve Halfmoon, warm up, measure, verify."""
    log = LOG_DIR / "halfmoon-uvicorn.log"
    wrk_log = LOG_DIR / "halfmoon-wrk.log"
    wrk_log.write_text("")
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    t0 = time.monotonic()
    token = broker_database_prepare(pg, env)
    print(f"halfmoon: database {pg.dbname} recreated and migrated in {time.monotonic() - t0:.1f} s")

    port = free_port()
    server = start_uvicorn("halfmoon.asgi:application", env, port, log)
    try:
        wait_http(port, "/healthz", server, log)
        warm = run_wrk(port, "halfmoon", "w", token, args.warmup, args.connections, wrk_log)
        print(
            f"halfmoon: warmup {args.warmup:g} s, {warm.committed} committed, "
            f"non-2xx {warm.non_2xx}"
        )
        profilers, raw = start_profilers(server.pid, args.duration) if args.profile else ([], None)
        meter = CpuMeter(pg, pg.dbname, server.pid)
        meter.start()
        result = run_wrk(port, "halfmoon", "b", token, args.duration, args.connections, wrk_log)
        result.server_cpu_s, result.database_cpu_s = meter.stop()
        if args.profile:
            report_profile(profilers, raw)
    finally:
        CHILDREN.stop(server)
    print(result.describe("halfmoon"))
    verify_halfmoon(pg, warm.committed + result.committed, args.connections)
    run_inprocess("halfmoon", env, token, args.inprocess)
    return result


def measure_bare(pg: Pg, args: argparse.Namespace) -> WrkResult:
    """Serve bench/bare (same serving and pool as Halfmoon) and drive it the same way."""
    log = LOG_DIR / "bare-uvicorn.log"
    wrk_log = LOG_DIR / "bare-wrk.log"
    wrk_log.write_text("")
    dbname = f"{pg.dbname}_bare"
    pg.recreate(dbname)
    create_sql = _read_constant(BENCH_DIR / "bare" / "models.py", "CREATE_TABLE_SQL")
    with pg.connect(dbname) as conn:
        conn.execute(create_sql)
    env = base_env(pg.url_for(dbname), "bare.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))

    port = free_port()
    server = start_uvicorn("bare.asgi:application", env, port, log)
    try:
        wait_http(port, "/bare/insert", server, log)
        warm = run_wrk(port, "bare", "w", "", args.warmup, args.connections, wrk_log)
        print(
            f"bare django: warmup {args.warmup:g} s, {warm.committed} committed, "
            f"non-2xx {warm.non_2xx}"
        )
        meter = CpuMeter(pg, dbname, server.pid)
        meter.start()
        result = run_wrk(port, "bare", "b", "", args.duration, args.connections, wrk_log)
        result.server_cpu_s, result.database_cpu_s = meter.stop()
    finally:
        CHILDREN.stop(server)
    print(result.describe("bare django"))
    with pg.connect(dbname) as conn:
        committed = conn.execute("SELECT count(*) FROM bare_row WHERE state = 'COMMITTED'")
        committed = committed.fetchone()[0]
    print(
        f"bare django verify: COMMITTED rows {committed} "
        f"(wrk counted {warm.committed + result.committed})"
    )
    run_inprocess("bare", env, "", args.inprocess)
    return result


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


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements and print the summary line last."""
    parser = argparse.ArgumentParser(
        description="Halfmoon transactional-send throughput vs bare Django and PostgreSQL."
    )
    parser.add_argument("--duration", type=float, default=20, help="seconds per measurement")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of uncounted warmup")
    parser.add_argument("--connections", type=int, default=32, help="concurrent producers")
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
        help="py-spy one uvicorn worker during the Halfmoon measurement",
    )
    args = parser.parse_args(argv)
    if args.duration < 1 or args.warmup < 1 or args.connections < 1:
        parser.error("--duration and --warmup must be >= 1 s, --connections >= 1")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    print(
        f"bench: {args.connections} connections, {args.duration:g} s per measurement after "
        f"{args.warmup:g} s warmup, uvicorn --workers {UVICORN_WORKERS}, {os.cpu_count()} CPUs, "
        f"PostgreSQL {pg.host}:{pg.port}/{pg.dbname}; logs in {LOG_DIR}"
    )
    try:
        halfmoon = measure_halfmoon(pg, args)
        bare = measure_bare(pg, args)
        pg_tps = measure_pg(pg, args)
    finally:
        CHILDREN.stop_all()
    tx, bare_tx = halfmoon.tx_per_s, bare.tx_per_s
    ratio_bare = tx / bare_tx if bare_tx else 0.0
    ratio_pg = tx / (pg_tps / 2) if pg_tps else 0.0
    print(
        f"tx_per_s={tx:.1f} bare_django_tx_per_s={bare_tx:.1f} pg_ceiling_per_s={pg_tps:.1f} "
        f"ratio_bare={ratio_bare:.3f} ratio_pg={ratio_pg:.3f}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)

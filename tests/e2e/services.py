"""PostgreSQL and Redis servers of a test's or a bench's own, so that stopping and starting
them (``tests/e2e/test_service_faults.py``, ``bench/chaos.py``) touches nothing else on the
machine.

- ``PrivatePostgres``: a cluster made by ``initdb`` under the system's temporary directory,
  trust auth, on a port of its own; ``start``, ``stop``, ``remove``; ``run_as_owner``,
  ``configure`` (lines of ``postgresql.conf``), ``base_backup`` (``pg_basebackup``) and
  ``data_from`` (a cluster started from a base backup, for a point-in-time restore:
  ``tests/e2e/backups.py``).
- ``RedisServer``: ``redis-server`` on a port of its own, nothing kept on disk; ``start``,
  ``stop``.
- ``pg_bin``: where Debian keeps ``initdb`` and ``pg_ctl`` (None when they are missing);
  ``postgres_owner``: how to run a command as PostgreSQL's owner.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import suppress
from pathlib import Path

import psycopg


def pg_bin() -> Path | None:
    """The directory of the newest local PostgreSQL's ``initdb`` and ``pg_ctl`` (Debian's
    ``/usr/lib/postgresql/<version>/bin``), or None."""
    root = Path("/usr/lib/postgresql")
    versions = sorted(root.iterdir(), reverse=True) if root.is_dir() else []
    for version in versions:
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    return None


def postgres_owner(directory: Path) -> list[str]:
    """The prefix that runs a command as PostgreSQL's owner: ``runuser -u postgres --`` when
    this runs as root (PostgreSQL refuses root), after giving ``directory`` to ``postgres``;
    ``[]`` otherwise (the current user owns everything)."""
    if os.geteuid() != 0:
        return []
    owner = pwd.getpwnam("postgres")
    os.chown(directory, owner.pw_uid, owner.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


def _listening(port: int) -> bool:
    with suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


class RedisServer:
    """``redis-server`` on 127.0.0.1:``port`` (no persistence), in its own process group."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it listens (at most 10 s).

        Raises:
            AssertionError: redis-server is missing or did not listen.
        """
        server = shutil.which("redis-server")
        assert server, "redis-server is missing (Debian: apt-get install -y redis-server)"
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tempfile.gettempdir()],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _listening(self.port):
                return
            time.sleep(0.05)
        raise AssertionError(f"redis-server did not listen on {self.port}")

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 10 s); nothing when it is not running."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


class PrivatePostgres:
    """A PostgreSQL cluster of its own: ``initdb`` into a new directory under the system's
    temporary directory (pytest's own is private to root, and the server runs as ``postgres``
    when this runs as root), trust auth, listening on 127.0.0.1:``port`` only."""

    def __init__(self, port: int) -> None:
        self.bin = pg_bin()
        assert self.bin is not None, "PostgreSQL's initdb is missing (Debian: postgresql)"
        self.directory = Path(tempfile.mkdtemp(prefix="halfmoon-pg-"))
        self.data = self.directory / "pgdata"
        self.port = port
        self.log = self.directory / "postgres.log"
        self._user = postgres_owner(self.directory)

    def run_as_owner(self, *args: str) -> None:
        """Run a command as the cluster's owner (``postgres`` when this runs as root), in
        ``/tmp``, at most 120 s.

        Raises:
            subprocess.CalledProcessError: it exited non-zero.
        """
        subprocess.run(
            [*self._user, *args], check=True, capture_output=True, timeout=120, cwd="/tmp"
        )

    def url(self, database: str = "postgres") -> str:
        """``postgres://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        """``initdb`` the cluster (trust auth, superuser ``postgres``)."""
        self.run_as_owner(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections (``pg_ctl -w``)."""
        self.run_as_owner(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-o", f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200",
            "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended); nothing when stopped."""
        with suppress(subprocess.CalledProcessError):
            self.run_as_owner(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"
            )

    def configure(self, settings: dict[str, str]) -> None:
        """Append ``name = 'value'`` lines to the cluster's ``postgresql.conf`` (a later line
        wins); they apply at the next ``start``. Quotes in a value are doubled."""
        lines = "".join(
            f"{name} = '{value.replace(chr(39), chr(39) * 2)}'\n"
            for name, value in settings.items()
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(lines)

    def base_backup(self, target: Path) -> None:
        """``pg_basebackup`` of the running cluster into ``target`` (a new directory the owner
        can write, e.g. under ``directory``): plain format, the WAL it needs streamed with it
        (``-X stream``), a fast checkpoint first.

        Raises:
            subprocess.CalledProcessError: the backup failed.
        """
        self.run_as_owner(
            str(self.bin / "pg_basebackup"), "-D", str(target), "-X", "stream", "-c", "fast",
            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "--no-password",
        )  # fmt: skip

    def data_from(self, backup: Path) -> None:
        """Make this (not initialised) cluster's data directory a copy of the base backup
        ``backup``, owned by the cluster's owner."""
        self.run_as_owner("cp", "-a", str(backup), str(self.data))

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its ``postgres://`` URL."""
        admin = self.url().replace("postgres://", "postgresql://", 1)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

"""A base backup with WAL archiving, and a point-in-time restore of it on a fresh server, as
docs/operations.md "Backups" describes, on ``PrivatePostgres`` clusters
(``tests/e2e/test_backup_restore.py``).

- ``wal_archive``: a WAL archive directory the cluster's owner writes, and the
  ``postgresql.conf`` settings that archive every finished WAL file into it.
- ``restore_point``: a named restore point; ``wal_switch_archived``: close the current WAL file
  and wait until the archiver has copied it.
- ``pitr_restore``: a new cluster from the base backup, recovered from the archive up to a
  restore point and promoted.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from tests.e2e.services import PrivatePostgres


def _admin(pg: PrivatePostgres) -> psycopg.Connection:
    return psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres", autocommit=True)


def wal_archive(pg: PrivatePostgres) -> tuple[Path, dict[str, str]]:
    """A WAL archive directory under the cluster's directory (its owner's), and the settings
    that archive into it: ``wal_level=replica``, ``archive_mode=on`` and an
    ``archive_command`` that never overwrites a file already archived."""
    archive = pg.directory / "wal_archive"
    pg.run_as_owner("mkdir", "-p", str(archive))
    return archive, {
        "wal_level": "replica",
        "archive_mode": "on",
        "archive_command": f"test ! -f {archive}/%f && cp %p {archive}/%f",
    }


def restore_point(pg: PrivatePostgres, name: str) -> str:
    """``pg_create_restore_point(name)``; returns its WAL location."""
    with _admin(pg) as conn:
        return str(conn.execute("SELECT pg_create_restore_point(%s)", [name]).fetchone()[0])


def wal_switch_archived(pg: PrivatePostgres, archive: Path, timeout_s: float = 60) -> str:
    """Close the current WAL file (``pg_switch_wal``) and wait until it is in ``archive``.
    Returns its name.

    Raises:
        AssertionError: not archived within ``timeout_s`` (with ``pg_stat_archiver``).
    """
    with _admin(pg) as conn:
        name = conn.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()[0]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (archive / name).exists():
                return name
            time.sleep(0.2)
        stats = conn.execute("SELECT * FROM pg_stat_archiver").fetchone()
    raise AssertionError(f"WAL file {name} not archived in {timeout_s} s: {stats}")


def in_recovery(pg: PrivatePostgres) -> bool:
    """``pg_is_in_recovery()`` of the running cluster."""
    with _admin(pg) as conn:
        return bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])


def pitr_restore(
    backup: Path, archive: Path, *, port: int, target_name: str, timeout_s: float = 120
) -> PrivatePostgres:
    """A fresh cluster on ``port`` restored from the base backup ``backup`` and the WAL files in
    ``archive`` up to the restore point ``target_name``, then promoted (a new timeline): the
    data directory copied, ``restore_command``, ``recovery_target_name`` and
    ``recovery_target_action = promote`` set, ``recovery.signal`` made, started, and waited
    for until it is out of recovery. The caller removes it.

    Raises:
        AssertionError: still in recovery after ``timeout_s`` (with the server's log).
    """
    pg = PrivatePostgres(port)
    try:
        pg.data_from(backup)
        pg.configure(
            {
                "restore_command": f"cp {archive}/%f %p",
                "recovery_target_name": target_name,
                "recovery_target_action": "promote",
            }
        )
        pg.run_as_owner("touch", str(pg.data / "recovery.signal"))
        pg.start()
        deadline = time.monotonic() + timeout_s
        while in_recovery(pg):
            if time.monotonic() > deadline:
                log = pg.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"still in recovery after {timeout_s} s:\n{log}")
            time.sleep(0.2)
    except BaseException:
        pg.remove()
        raise
    return pg

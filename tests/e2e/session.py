"""What the e2e tests of one pytest session share instead of redoing it per test (their
fixtures are in tests/e2e/conftest.py):

- ``migrated_database``: a database cloned (``CREATE DATABASE ... TEMPLATE``, under a second)
  from ``E2E_TEMPLATE``, migrated once per session (``manage.py migrate``: 10-30 s each time).
- ``static_files``: ``collectstatic``'s output, gathered once per session, copied into a var
  directory.
- ``session_cleanup``: drops the template and the session's directory at the session's end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.e2e.processes import PG_ADMIN_URL, broker_env, database_url, manage, worker_database


def _session_name(suffix: str) -> str:
    """A name of this test run's own: ``HALFMOON_TEST_DATABASE`` (default ``test_halfmoon``),
    ``suffix``, then the pytest-xdist worker if any (``worker_database``)."""
    base = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon")
    return worker_database(f"{base}_{suffix}")


E2E_TEMPLATE = _session_name("e2e_template")
"""The database migrated once per test session (``migrated_template``), cloned by
``migrated_database``: ``CREATE DATABASE ... TEMPLATE`` takes a fraction of a second where
``manage.py migrate`` takes 10-30 s."""
_session: dict[str, Path] = {}  # what this session made: "template", "static" (a directory)


def _session_dir() -> Path:
    if "dir" not in _session:
        _session["dir"] = Path(tempfile.mkdtemp(prefix="halfmoon-e2e-session-"))
    return _session["dir"]


def _session_env() -> dict[str, str]:
    return broker_env(
        database_url=database_url(E2E_TEMPLATE),
        redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
        var_dir=_session_dir() / "var",
    )


def migrated_template() -> str:
    """``E2E_TEMPLATE``, made on the first call of the session (dropped if left by an earlier
    run, created, ``manage.py migrate``) and then reused; returns its name.
    ``session_cleanup`` (tests/e2e/conftest.py, at the session's end) drops it."""
    if "template" not in _session:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {E2E_TEMPLATE} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {E2E_TEMPLATE}")
        _session["template"] = _session_dir()
        manage(_session_env(), "migrate", "--noinput", "-v", "0", timeout_s=300)
    return E2E_TEMPLATE


@contextmanager
def migrated_database(name: str) -> Iterator[str]:
    """As ``pg_database``, but the database is a copy of the session's migrated template
    (``migrated_template``): every migration applied, as ``manage.py migrate`` leaves it
    (console roles included), named ``worker_database(name)``. Yields its ``postgres://`` URL;
    dropped afterwards."""
    template = migrated_template()
    name = worker_database(name)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield database_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def static_files(var_dir: Path) -> None:
    """Fill ``<var_dir>/staticfiles`` (``STATIC_ROOT`` of ``HALFMOON_VAR_DIR=var_dir``) with what
    ``manage.py collectstatic`` gathers, run once per session and copied from then on."""
    if "static" not in _session:
        env = {**_session_env(), "HALFMOON_VAR_DIR": str(_session_dir() / "static-var")}
        manage(env, "collectstatic", "--noinput", "-v", "0")
        _session["static"] = _session_dir() / "static-var" / "staticfiles"
    shutil.copytree(_session["static"], var_dir / "staticfiles", dirs_exist_ok=True)


def session_cleanup() -> None:
    """Drop the session's template database and remove its directory (what
    ``migrated_template`` and ``static_files`` made); nothing when they made nothing."""
    if "template" in _session:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {E2E_TEMPLATE} WITH (FORCE)")
    if "dir" in _session:
        shutil.rmtree(_session["dir"], ignore_errors=True)
    _session.clear()

"""The e2e tests' session fixtures: what one pytest session makes once for all of them
(``tests.e2e.session``).

- ``e2e_session`` (autouse, session): at the session's end, drops the migrated template and
  removes the session's directory, whichever test made them.
- ``e2e_template``: the name of the database migrated once per session.
- ``migrated_database``: ``migrated_database(name)`` as a context manager, a copy of that
  template dropped afterwards (``with migrated_database("halfmoon_e2e_x") as url: ...``).
- ``static_files``: ``static_files(var_dir)`` fills ``<var_dir>/staticfiles``.

The e2e tests start processes on Redis databases of their own (a file's fixed one, or the
worker's ``REDIS_URL``: tests/xdist_redis.py) and on the worker's ports
(``tests.e2e.processes.PORTS``), in databases named for the worker (``worker_database``):
bin/test runs each e2e file on one pytest-xdist worker, among the other tests
(tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.e2e import session


@pytest.fixture(scope="session", autouse=True)
def e2e_session() -> Iterator[None]:
    yield
    session.session_cleanup()


@pytest.fixture(scope="session")
def e2e_template() -> str:
    return session.migrated_template()


@pytest.fixture(scope="session")
def migrated_database() -> Callable[[str], AbstractContextManager[str]]:
    return session.migrated_database


@pytest.fixture(scope="session")
def static_files() -> Callable[[Path], None]:
    return session.static_files

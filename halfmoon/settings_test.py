"""Settings for the test suite: the same as production, with PostgreSQL as the default
database (tests run against real PostgreSQL and Redis, never the embedded SQLite file)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")

from halfmoon.settings import *  # noqa: E402,F403

"""Settings for the test suite: the same as production, with the machine's PostgreSQL
(127.0.0.1:5432) as the default database; bin/test sets DATABASE_URL to an embedded server of
its own when none answers there. Tests run against real PostgreSQL and Redis."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
# A Redis database of the tests' own: tasks the code under test queues (an Op flush) and the
# console feed never reach a broker running on the default database.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# Production settings (DJANGO_DEBUG off) need a key of their own to serve (halfmoon.security);
# the processes the tests start inherit it.
os.environ.setdefault("DJANGO_SECRET_KEY", "halfmoon-tests-key-not-secret")
# Spark on two local threads (local[2]); the tests' archives go to tmp paths.
os.environ.setdefault("HALFMOON_SPARK_MASTER", "local[2]")
os.environ.setdefault("HALFMOON_SPARK_DRIVER_MEMORY", "1g")

from halfmoon.settings import *  # noqa: E402,F403

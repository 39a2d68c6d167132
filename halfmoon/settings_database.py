"""The database settings of ``halfmoon.settings`` (it imports them all): ``DATABASES`` from
``DATABASE_URL``, set up per server kind (``HALFMOON_SERVER``), with the pool, timeouts, TCP
keepalives and prepared statements. docs/settings.md "Database" says what each means."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from halfmoon.database_url import database_settings
from halfmoon.embedded_postgres import DATABASE as EMBEDDED_DATABASE
from halfmoon.embedded_postgres import POSTGRES_PORT_DEFAULT as EMBEDDED_POSTGRES_PORT_DEFAULT
from halfmoon.env import env_bool, env_int, env_str

# --- Database -------------------------------------------------------------------------------
# PostgreSQL only: DATABASE_URL (postgres://user:password@host:5432/name). Unset, it is the
# quick start's embedded server (halfmoon.embedded_postgres), which bin/run starts on
# 127.0.0.1 at HALFMOON_EMBEDDED_POSTGRES_PORT, database "halfmoon", so manage.py in another
# terminal reaches the running broker with no environment. Set up per server kind (HALFMOON_SERVER;
# docs/operations.md "Serving: what was measured"):
# - "asgi" (the default: uvicorn, Celery, manage.py): Django's psycopg connection pool; under
#   ASGI each request runs in a fresh thread, so CONN_MAX_AGE would open a connection per request
#   (and run PostgreSQL out of connections);
# - "wsgi" (gunicorn sync workers, one request at a time per process): one persistent
#   connection per process (CONN_MAX_AGE, HALFMOON_DB_CONN_MAX_AGE seconds, checked before
#   reuse), no pool.
HALFMOON_SERVER = env_str("HALFMOON_SERVER", "asgi")
if HALFMOON_SERVER not in ("asgi", "wsgi"):
    raise ImproperlyConfigured(f"HALFMOON_SERVER={HALFMOON_SERVER!r} is neither asgi nor wsgi")
HALFMOON_EMBEDDED_POSTGRES_PORT = env_int(
    "HALFMOON_EMBEDDED_POSTGRES_PORT", EMBEDDED_POSTGRES_PORT_DEFAULT, minimum=1, maximum=65535
)
DATABASE_URL = env_str(
    "DATABASE_URL",
    f"postgres://postgres@127.0.0.1:{HALFMOON_EMBEDDED_POSTGRES_PORT}/{EMBEDDED_DATABASE}",
)
# Several hosts (a high-availability formation: docs/operations.md "High availability") are
# libpq's: postgres://user@a:5432,b:5432/halfmoon?target_session_attrs=read-write.
_db = database_settings(DATABASE_URL)
_db["CONN_MAX_AGE"] = 0
# A database that is away fails fast instead of hanging a request: libpq's connect_timeout
# bounds each connection attempt (a host that never answers), the pool's timeout a request's
# wait for a connection; past either the API answers 503 service_unavailable
# (broker.api.exceptions). Options given in DATABASE_URL's query string are kept.
_db.setdefault("OPTIONS", {}).setdefault(
    "connect_timeout", env_int("HALFMOON_DB_CONNECT_TIMEOUT", 5, minimum=2)
)
# A database machine that vanishes without a word (no TCP reset: lost power, a cut link) is
# noticed within about 25 s even by a connection waiting for a result (TCP keepalives: idle
# 10 s, then 3 probes 5 s apart), and data it never acknowledges fails a statement after 10 s
# (tcp_user_timeout, ms), instead of the kernel's 15 minutes: the pool then connects to the
# promoted standby (docs/operations.md "High availability").
for _name, _value in (
    ("keepalives", 1),
    ("keepalives_idle", 10),
    ("keepalives_interval", 5),
    ("keepalives_count", 3),
    ("tcp_user_timeout", 10_000),
):
    _db["OPTIONS"].setdefault(_name, _value)
# A statement run HALFMOON_DB_PREPARE_THRESHOLD times on a connection is prepared there
# (psycopg's prepare_threshold). Only the broker's set-based statements bind their parameters
# server-side, and so get prepared (broker.plumbing.sql.statement_cursor): PostgreSQL plans
# a send's and an end's CTE (~1.5-2.5 ms of planning apiece) once per connection instead of on
# every request. The ORM keeps Django's client-side binding. 0 turns preparing off, as a
# PgBouncer in transaction pooling mode needs (docs/operations.md "Prepared statements").
_db["OPTIONS"].setdefault(
    "prepare_threshold", env_int("HALFMOON_DB_PREPARE_THRESHOLD", 5, minimum=0) or None
)
if HALFMOON_SERVER == "wsgi":
    _db["CONN_MAX_AGE"] = env_int("HALFMOON_DB_CONN_MAX_AGE", 600, minimum=0)
    _db["CONN_HEALTH_CHECKS"] = True
elif env_bool("HALFMOON_DB_POOL", True):
    _db["OPTIONS"]["pool"] = {
        "min_size": env_int("HALFMOON_DB_POOL_MIN", 2, minimum=0),
        "max_size": env_int("HALFMOON_DB_POOL_MAX", 20, minimum=1),
        "timeout": env_int("HALFMOON_DB_POOL_TIMEOUT", 5, minimum=1),
        # A connection the pool failed to replace is retried with backoff (1 s, 2 s, ...) for
        # this long, then given up: the next request that needs one connects at once. Short,
        # so that after a failover the pool reaches the promoted primary within a few seconds
        # instead of sleeping through psycopg_pool's default of 300 s of backoff.
        "reconnect_timeout": env_int("HALFMOON_DB_POOL_RECONNECT_TIMEOUT", 5, minimum=1),
    }
_db.setdefault("TEST", {})["NAME"] = env_str("HALFMOON_TEST_DATABASE", "test_halfmoon")
DATABASES = {"default": _db}

"""Settings of the bare Django baseline: one app, no middleware, the same database setup as
``halfmoon/settings.py`` for PostgreSQL (``CONN_MAX_AGE`` 0 and Django's psycopg pool with the
same ``HALFMOON_DB_POOL*`` variables and defaults)."""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "bench-bare-insecure-key"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = ["bare"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "bare.urls"
ASGI_APPLICATION = "bare.asgi.application"

_db = dj_database_url.parse(
    os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/halfmoon_bench_bare"
)
_db["CONN_MAX_AGE"] = 0
if os.environ.get("HALFMOON_DB_POOL", "true").lower() not in ("0", "false", "no", "off"):
    _db["OPTIONS"] = {
        "pool": {
            "min_size": int(os.environ.get("HALFMOON_DB_POOL_MIN") or 2),
            "max_size": int(os.environ.get("HALFMOON_DB_POOL_MAX") or 20),
            "timeout": 10,
        }
    }
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_I18N = False
USE_TZ = True
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}

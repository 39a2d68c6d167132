"""``DATABASE_URL`` as Django's ``DATABASES["default"]``, read by libpq's own URI parser
(through psycopg), so that what libpq accepts works: several hosts for a high-availability
formation (``postgres://user@a:5432,b:5432/halfmoon?target_session_attrs=read-write``:
libpq tries each in turn and keeps the one that takes writes), percent-encoded passwords, and
any connection parameter in the query string (``sslmode``, ``connect_timeout``, ...), which
go to ``OPTIONS``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

SCHEMES = ("postgres", "postgresql", "pgsql")


def database_settings(url: str) -> dict[str, Any]:
    """Django's database entry for a PostgreSQL URL.

    Shape: ``{"ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS"}``; with several
    hosts, ``HOST`` and ``PORT`` are libpq's comma-separated lists
    (``"10.0.0.1,10.0.0.2"``, ``"5432,5432"``), which Django hands to psycopg as they are.
    ``OPTIONS`` holds every other parameter of the query string, as strings.

    Raises:
        ImproperlyConfigured: the scheme is not one of ``SCHEMES``, or libpq cannot parse it.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a PostgreSQL URL (postgres://user:password@host:5432/name), "
            f"not {scheme + '://' if sep else repr(url)}: Halfmoon runs on PostgreSQL only. "
            "Leave DATABASE_URL unset for bin/run's embedded server; data kept in SQLite moves "
            'as README\'s "Moving from the SQLite default" says.'
        )
    try:
        params: dict[str, Any] = conninfo_to_dict(f"postgresql://{rest}")
    except ProgrammingError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid libpq URL: {exc}") from exc
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
    }

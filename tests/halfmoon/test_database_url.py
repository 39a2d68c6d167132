"""``DATABASE_URL`` is read by libpq's URI parser (halfmoon.database_url): a single host as
before, several hosts for a high-availability formation, libpq parameters in the query
string, and a clear error for anything else."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from halfmoon.database_url import database_settings


def test_a_single_host_url_gives_django_s_fields():
    entry = database_settings("postgres://hm:s%40cret@db.example:6432/halfmoon")

    assert entry == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "halfmoon",
        "USER": "hm",
        "PASSWORD": "s@cret",
        "HOST": "db.example",
        "PORT": "6432",
        "OPTIONS": {},
    }


def test_several_hosts_stay_libpq_s_lists_and_the_query_goes_to_options():
    entry = database_settings(
        "postgresql://hm@db1:5432,db2:5433/halfmoon?target_session_attrs=read-write&sslmode=require"
    )

    assert (entry["HOST"], entry["PORT"]) == ("db1,db2", "5432,5433")
    assert entry["OPTIONS"] == {"target_session_attrs": "read-write", "sslmode": "require"}


def test_the_pgsql_scheme_is_accepted():
    assert database_settings("pgsql://hm@db/halfmoon")["HOST"] == "db"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///var/halfmoon.sqlite3", "PostgreSQL only"),
        ("db.example/halfmoon", "PostgreSQL only"),
        ("postgres://hm@db/halfmoon?no_such_parameter=1", "not a valid libpq URL"),
    ],
)
def test_anything_else_stops_the_process_with_a_clear_error(url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        database_settings(url)

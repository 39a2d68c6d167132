"""What the server's own failures answer and log: an unexpected error is a 500 in the
contract's body whose ``details.request_id`` names the log line with its traceback; an
unreachable database is a 503 ``service_unavailable`` with Retry-After, fast, never a 500.

The database is made unreachable for real (``tests.database_away``): the ``default``
connection is replaced, for the duration of a block, by one to a closed port (connection
refused) or to a server that accepts and never answers (the connect timeout), then restored.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterator

import pytest
from django.test import Client

from tests.api_helpers import assert_error
from tests.conftest import client_for
from tests.database_away import closed_port, database_at, silent_server

HEX_ID = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture
def server_log() -> Iterator[io.StringIO]:
    """Everything LOGGING's handlers (django.request's and the halfmoon logger's) write during
    the test, instead of stderr."""
    buffer = io.StringIO()
    handlers = [
        *logging.getLogger("django.request").handlers,
        *logging.getLogger("halfmoon").handlers,
    ]
    previous = [handler.setStream(buffer) for handler in handlers]
    yield buffer
    for handler, stream in zip(handlers, previous, strict=True):
        handler.setStream(stream)


def lenient_client() -> Client:
    return Client(raise_request_exception=False)


# --- Unexpected errors: 500 with a request id, logged with the traceback ------------------


@pytest.mark.urls("tests.halfmoon.failing_urls")
@pytest.mark.parametrize(
    ("url", "raised"),
    [
        ("/api/v1/test-failing", "RuntimeError: an unexpected failure in a DRF view"),
        ("/api/v1/test-failing-plain", "KeyError: 'an unexpected failure outside DRF'"),
    ],
)
def test_an_unexpected_error_is_a_500_whose_request_id_names_its_logged_traceback(
    server_log, url, raised
):
    response = lenient_client().get(url)

    error = assert_error(response, 500, "internal_error")
    request_id = error["details"]["request_id"]
    assert HEX_ID.match(request_id), error
    assert response["X-Request-ID"] == request_id
    log = server_log.getvalue()
    assert f"request_id={request_id} Internal Server Error: {url}" in log, log
    assert "Traceback (most recent call last)" in log
    assert raised in log


@pytest.mark.urls("tests.halfmoon.failing_urls")
def test_each_failing_request_has_its_own_id(server_log):
    first = lenient_client().get("/api/v1/test-failing").json()["error"]["details"]
    second = lenient_client().get("/api/v1/test-failing").json()["error"]["details"]

    assert first["request_id"] != second["request_id"]
    assert server_log.getvalue().count("Traceback") == 2


@pytest.mark.urls("tests.halfmoon.failing_urls")
def test_a_console_page_that_fails_is_the_html_500_page_and_is_logged_with_an_id(server_log):
    response = lenient_client().get("/console/test-failing/")

    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    line = next(
        line for line in server_log.getvalue().splitlines() if "Internal Server Error" in line
    )
    assert re.search(r"request_id=[0-9a-f]{32} Internal Server Error: /console/test-failing/", line)


def test_logging_sends_request_errors_and_the_halfmoon_logger_to_stderr(settings):
    handlers = settings.LOGGING["handlers"]
    loggers = settings.LOGGING["loggers"]

    assert loggers["django.request"]["level"] == "ERROR"
    for name in (*loggers["django.request"]["handlers"], *loggers["halfmoon"]["handlers"]):
        assert handlers[name]["stream"] == "ext://sys.stderr"
    assert logging.getLogger("django.request").handlers


# --- The database away: 503 service_unavailable, fast ----------------------------------------


def assert_unavailable(response, server_log: io.StringIO) -> None:
    error = assert_error(response, 503, "service_unavailable")
    request_id = error["details"]["request_id"]
    assert HEX_ID.match(request_id)
    assert response["Retry-After"] == "5"
    assert response["X-Request-ID"] == request_id
    assert f"request_id={request_id}" in server_log.getvalue()


@pytest.mark.django_db
def test_while_the_database_refuses_connections_the_api_answers_503(server_log, owner, topic):
    owner.raise_request_exception = False
    with database_at(closed_port()):
        response = owner.get("/api/v1/topics")

    assert_unavailable(response, server_log)
    assert "Database unavailable on GET /api/v1/topics: OperationalError" in server_log.getvalue()
    assert owner.get("/api/v1/topics").status_code == 200  # back: the same client is served


@pytest.mark.django_db
def test_an_access_key_that_cannot_be_looked_up_is_a_503_not_a_401(server_log):
    client = client_for("a-token-never-seen")
    client.raise_request_exception = False
    with database_at(closed_port()):
        response = client.get("/api/v1/transactions/NO-SUCH-TX")

    assert_unavailable(response, server_log)


@pytest.mark.django_db
@pytest.mark.urls("tests.halfmoon.failing_urls")
def test_outside_drf_views_the_database_away_is_a_503_too(server_log):
    """A plain Django view reading the database: its error reaches handler500."""
    with database_at(closed_port()):
        response = lenient_client().get("/test-database")

    assert_unavailable(response, server_log)
    assert "Service Unavailable: /test-database" in server_log.getvalue()


@pytest.mark.django_db
def test_through_the_pool_the_wait_for_a_connection_is_bounded_by_its_timeout(server_log, owner):
    owner.raise_request_exception = False
    with database_at(closed_port(), pool_timeout=1):
        started = time.monotonic()
        response = owner.get("/api/v1/topics")
        elapsed = time.monotonic() - started

    assert_unavailable(response, server_log)
    assert elapsed < 5


@pytest.mark.django_db
def test_a_database_that_never_answers_fails_within_the_connect_timeout(server_log, owner):
    owner.raise_request_exception = False
    with silent_server() as port, database_at(port, connect_timeout=2):
        started = time.monotonic()
        response = owner.get("/api/v1/topics")
        elapsed = time.monotonic() - started

    assert_unavailable(response, server_log)
    assert 1.5 < elapsed < 6


def test_the_database_settings_bound_every_wait(settings):
    options = settings.DATABASES["default"]["OPTIONS"]

    assert 2 <= options["connect_timeout"] <= 10
    assert options["pool"]["timeout"] <= 10

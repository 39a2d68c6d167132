"""The console while the database does not answer.

- Every console page carries the banner (hidden) and the script that shows it
  (``static/console/database.js``, which asks ``/healthz``); the browser test of it is
  tests/e2e/test_database_away_browser.py.
- A console page asked for meanwhile is a readable HTML 503 with ``Retry-After`` and
  ``X-Request-ID``, not the API's JSON and not a 500, and it reloads itself when the database
  is back (the same script, told so by its body).

The database is made unreachable for real (``tests.database_away``): connection refused."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from tests.console.conftest import signed_in
from tests.database_away import closed_port, database_at

pytestmark = pytest.mark.django_db

BANNER = 'id="database-banner" hidden'


def test_a_console_page_carries_the_hidden_database_banner_and_its_script(client):
    signed_in(client, "viewer")

    page = client.get("/console/").content.decode()

    assert BANNER in page
    assert "The database does not answer" in page
    assert 'data-healthz-url="/healthz"' in page
    assert '<script src="/static/console/database.js" defer></script>' in page
    assert "<script>" not in page  # no inline script: the banner is static/console/database.js
    assert finders.find("console/database.js")


def test_the_healthz_it_asks_names_the_database_state_without_a_token(client):
    body = Client().get("/healthz").json()

    assert body["database"] == "ok"


@pytest.mark.parametrize("path", ["/console/", "/console/transactions/", "/console/audit/"])
def test_a_console_page_asked_for_while_the_database_is_away_is_an_html_503(path):
    operator = Client(raise_request_exception=False)
    signed_in(operator, "operator")
    with database_at(closed_port()):
        response = operator.get(path)

    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert response["Retry-After"] == "5"
    assert len(response["X-Request-ID"]) == 32
    page = response.content.decode()
    assert "503 · Database unavailable" in page
    assert "The broker&#x27;s database does not answer" in page
    assert "reloads by itself when the database answers again" in page
    assert "data-reload-when-database-back" in page
    assert '<script src="/static/console/database.js" defer></script>' in page


@pytest.mark.urls("tests.halfmoon.failing_urls")
def test_an_unexpected_console_failure_is_still_the_500_page_without_retry_after():
    response = Client(raise_request_exception=False).get("/console/test-failing/")

    assert response.status_code == 500
    assert "Retry-After" not in response
    assert "data-reload-when-database-back" not in response.content.decode()

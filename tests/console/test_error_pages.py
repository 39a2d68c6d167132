"""Console paths answer HTML error pages; API paths keep the contract's JSON error body."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_user_without_a_console_role_gets_an_html_403(client, console_user):
    client.force_login(console_user(None))
    response = client.get("/console/")
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    assert b"no console role" in response.content


def test_an_unknown_console_path_is_an_html_404(client, console_user):
    client.force_login(console_user("viewer"))
    response = client.get("/console/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_api_paths_keep_the_json_error_body(client):
    response = client.get("/api/v1/no-such-endpoint")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"

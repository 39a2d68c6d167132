"""api-v1 passes the console's middleware by (``halfmoon.console_middleware``): its requests
get no session, no signed-in user, no messages' storage and no CSRF processing, while every
other path keeps all four, and both keep the headers every path gets."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.api_helpers import send_half

pytestmark = pytest.mark.django_db


def test_an_api_request_gets_no_session_user_messages_or_csrf_work(producer, topic, producer_group):
    response = send_half(producer)

    assert response.status_code == 201
    request = response.wsgi_request
    for attribute in ("session", "_messages", "auser", "csrf_processing_done"):
        assert not hasattr(request, attribute), attribute
    assert "csrftoken" not in response.cookies and "sessionid" not in response.cookies
    # What every path gets still runs around them.
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Length"] == str(len(response.content))


def test_a_console_request_still_gets_session_user_messages_and_csrf():
    client = Client(enforce_csrf_checks=True)

    page = client.get(reverse("console:login"))

    assert page.status_code == 200
    request = page.wsgi_request
    for attribute in ("session", "_messages", "user"):
        assert hasattr(request, attribute), attribute
    assert "csrftoken" in page.cookies
    refused = client.post(reverse("console:login"), {"username": "a", "password": "b"})
    assert refused.status_code == 403  # no CSRF token: refused as before


def test_only_api_v1_paths_pass_them_by():
    """The schema and its Swagger page are not api-v1: they keep the whole stack."""
    for path in ("/api/schema/", "/api/docs/", "/admin/login/"):
        assert hasattr(Client().get(path).wsgi_request, "session"), path

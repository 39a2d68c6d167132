"""A NUL character in a path or a query parameter never reaches PostgreSQL (which refuses it in
text, a 500): 404 for a path, 400 for a query parameter, before any view runs
(``halfmoon.nul_guard``). Each of these answered 500 before the guard."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.api_helpers import assert_error


@pytest.fixture
def superuser_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-for-nul-guard"))
    return client


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/transactions?producer_group=a%00b",
        "/api/v1/transactions?state=PREPARED&topic=T%00",
        "/api/v1/messages?topic=T&key=a%00b",
        "/api/v1/topics?a%00=1",
    ],
)
def test_a_nul_in_an_api_query_parameter_is_a_400(owner, path: str) -> None:
    assert_error(owner.get(path), 400, "bad_request")


@pytest.mark.parametrize(
    "path",
    [
        "/admin/broker/transaction/a%00b/change/",
        "/admin/broker/transaction/?transaction_id=a%00b",
        "/admin/broker/topic/?q=a%00b",
    ],
)
def test_a_nul_in_an_admin_page_is_no_500(superuser_client: Client, path: str) -> None:
    response = superuser_client.get(path)
    assert response.status_code in (400, 404), response.content[:300]


def test_a_nul_in_a_console_query_is_the_console_400_page(superuser_client: Client) -> None:
    response = superuser_client.get("/console/transactions/?producer_group=a%00b")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


def test_a_nul_in_a_path_outside_the_routes_formats_is_a_404(owner) -> None:
    assert_error(owner.get("/metrics%00"), 404, "not_found")

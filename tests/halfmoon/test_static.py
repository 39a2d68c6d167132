"""/static/ through the ASGI application as production serves it (halfmoon.asgi): servestatic in
front of Django, from the files ``collectstatic`` gathered; the API behind it still answers."""

from __future__ import annotations

import re

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command

from broker.services.topology.writes import access_key_create
from halfmoon.asgi import static_files_app
from halfmoon.serving import PooledHTTP


@pytest.fixture
def collected(settings, tmp_path):
    """STATIC_ROOT in tmp_path, filled by ``collectstatic`` as bin/run does."""
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    call_command("collectstatic", "--noinput", verbosity=0)
    return settings.STATIC_ROOT


def asgi_get(app, url: str, **kwargs) -> httpx.Response:
    """One request to ``app`` over ASGI; Django's sync views run on this thread (async_to_sync),
    so they see the test's database transaction."""

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.request(kwargs.pop("method", "GET"), url, **kwargs)

    return async_to_sync(call)()


def test_the_admin_stylesheet_is_served_from_the_collected_files(collected):
    app = static_files_app(PooledHTTP())

    response = asgi_get(app, "/static/admin/css/base.css")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")
    assert response.content == (collected / "admin/css/base.css").read_bytes()
    assert "max-age=60" in response.headers["cache-control"]
    assert asgi_get(app, "/static/admin/css/nothing-here.css").status_code == 404


@pytest.mark.django_db
def test_every_asset_of_the_swagger_page_is_served(collected):
    app = static_files_app(PooledHTTP())
    page = asgi_get(app, "/api/docs/")
    assert page.status_code == 200

    assets = set(re.findall(r"""(?:src|href)=["'](/static/[^"']+)["']""", page.text))
    assert any("swagger-ui" in url for url in assets), assets
    for url in assets:
        assert asgi_get(app, url).status_code == 200, url


def test_without_collected_files_nothing_is_served_and_the_log_says_why(settings, tmp_path, caplog):
    settings.STATIC_ROOT = tmp_path / "empty"

    app = static_files_app(PooledHTTP())

    assert asgi_get(app, "/static/admin/css/base.css").status_code == 404
    assert "run manage.py collectstatic" in caplog.text


@pytest.mark.django_db(transaction=True)  # Django's ASGI handler closes the connection per request
def test_the_api_answers_through_the_same_application(collected, topic):
    _, token = access_key_create(name="owner", is_admin=True)
    app = static_files_app(PooledHTTP())
    bearer = {"Authorization": f"Bearer {token}"}

    listed = asgi_get(app, "/api/v1/topics", headers=bearer)
    created = asgi_get(
        app, "/api/v1/topics", method="POST", headers=bearer, json={"name": "Viaasgi"}
    )

    assert listed.status_code == 200
    assert [t["name"] for t in listed.json()] == ["TranTest"]
    assert created.status_code == 201, created.text
    assert created.json()["queue_nums"] == 4

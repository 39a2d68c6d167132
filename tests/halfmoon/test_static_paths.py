"""/static/ never answers outside the contract: a path that climbs out of the static
root, names an absolute path or holds a NUL byte is a 404 in the contract's body, never a file
outside STATIC_ROOT and never a 500, in both of servestatic's lookup modes.

Requests are raw ASGI scopes, as uvicorn passes them (the path percent-decoded, dot segments
kept), not through an HTTP client that would normalise the path first."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command

from halfmoon.asgi import static_files_app
from halfmoon.serving import PooledHTTP
from tests.api_helpers import SNAKE_CASE

HOSTILE = [
    "/static/../../halfmoon/settings.py",  # /static/%2e%2e/%2e%2e/halfmoon/settings.py
    "/static/admin/../../../halfmoon/settings.py",
    "/static/admin/css/../../../../halfmoon/settings.py",
    "/static//etc/passwd",
    "/static/..%2f..%2fhalfmoon%2fsettings.py",
    "/static/..\\..\\halfmoon\\settings.py",
    "/static/a\x00b",
    "/static/admin/css/base.css\x00",
    "/static/../../halfmoon/settings.py\x00.css",
    "/static/\udcff",
]


async def _call(app: Any, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    received = False
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start = messages[0]
    body = b"".join(m.get("body", b"") for m in messages[1:])
    return start["status"], {k.lower(): v for k, v in start["headers"]}, body


def asgi_get(app: Any, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    return async_to_sync(_call)(app, path)


@pytest.fixture
def collected(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    call_command("collectstatic", "--noinput", verbosity=0)
    return settings.STATIC_ROOT


@pytest.fixture(params=["precomputed", "autorefresh"])
def static_app(request, settings, collected):
    """The production app (files listed once at start) and the DEBUG one (looked up on each
    request, servestatic's autorefresh), both answering with DEBUG off."""
    settings.DEBUG = request.param == "autorefresh"
    app = static_files_app(PooledHTTP())
    settings.DEBUG = False
    return app


@pytest.mark.django_db
@pytest.mark.parametrize("path", HOSTILE)
def test_a_path_out_of_the_static_root_is_a_404_in_the_contracts_body(static_app, path):
    status, headers, body = asgi_get(static_app, path)

    assert status == 404, (status, body[:200])
    assert headers[b"content-type"].startswith(b"application/json")
    assert b"SECRET_KEY" not in body and b"root:" not in body
    error = json.loads(body)["error"]
    assert error["code"] == "not_found" and SNAKE_CASE.match(error["code"])


def test_the_static_files_themselves_are_still_served(static_app, collected):
    status, _, body = asgi_get(static_app, "/static/admin/css/base.css")

    assert status == 200
    assert body == (collected / "admin/css/base.css").read_bytes()

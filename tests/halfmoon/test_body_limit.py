"""Request bodies bounded while they stream, against the real ASGI application
(``halfmoon.asgi.application``): crafted ``http.request`` messages, each body byte the
application pulls counted.

- A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is refused with 413 ``request_too_large`` as soon
  as the bytes received pass the limit; a ``Content-Length`` over it before any byte is read.
- A chunked body (no ``Content-Length``) is read whole by the API, not taken as empty.
- Websocket and lifespan scopes pass the limit untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from broker.models import Topic, Transaction
from broker.services.topology.writes import access_key_create
from halfmoon.asgi import application
from halfmoon.body_limit import BodyLimitMiddleware

LIMIT = 10_000
CHUNK = 1_000


@dataclass
class Exchange:
    """One request through an ASGI application: what it answered and what it pulled."""

    messages_pulled: int = 0
    bytes_pulled: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")

    @property
    def headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode().lower(): v.decode() for k, v in start["headers"]}

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def json(self) -> Any:
        return json.loads(self.body)


def http_scope(path: str, headers: dict[str, str], method: str = "POST") -> dict[str, Any]:
    """An HTTP/1.1 scope as uvicorn builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def chunks_of(body: bytes, size: int = CHUNK) -> Iterator[dict[str, Any]]:
    """``body`` as ``http.request`` messages of ``size`` bytes, the last without more_body."""
    pieces = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    for index, piece in enumerate(pieces):
        yield {"type": "http.request", "body": piece, "more_body": index < len(pieces) - 1}


def long_body(size: int = CHUNK, total: int = 20 * LIMIT) -> Iterator[dict[str, Any]]:
    """A body of ``total`` bytes (20 times the limit), ``size`` bytes per message. Finite, so
    that an application reading it all (no limit) ends instead of filling the disk."""
    return chunks_of(b"x" * total, size)


def call(app: Any, scope: dict[str, Any], messages: Iterable[dict[str, Any]]) -> Exchange:
    """Run one request through ``app``; ``receive`` hands out ``messages`` one at a time and,
    once they are all pulled, waits as a client that keeps its connection open does. Django's
    sync views run on this thread (async_to_sync)."""
    exchange = Exchange()
    pending = iter(messages)

    async def receive() -> dict[str, Any]:
        message = next(pending, None)
        if message is None:
            await asyncio.Event().wait()  # the client says nothing more; cancelled by the app
        exchange.messages_pulled += 1
        exchange.bytes_pulled += len(message.get("body", b""))
        return message

    async def send(message: dict[str, Any]) -> None:
        exchange.sent.append(message)

    async def run() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)

    async_to_sync(run)()
    return exchange


def assert_too_large(exchange: Exchange, limit: int) -> dict[str, Any]:
    """A 413 with the contract's error body (code ``request_too_large``, details.limit)
    that closes the connection; returns the inner error."""
    assert exchange.status == 413, exchange.body
    assert exchange.headers["content-type"] == "application/json"
    assert exchange.headers["connection"] == "close"
    assert int(exchange.headers["content-length"]) == len(exchange.body)
    body = exchange.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == "request_too_large"
    assert str(limit) in error["message"]
    assert error["details"]["limit"] == limit
    return error


@pytest.fixture
def limit(settings) -> int:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT
    return LIMIT


@pytest.fixture
def producer_token(db, topic, producer_group) -> str:
    _, token = access_key_create(name="producer", producer_groups=["G"])
    return token


def half_body(size: int | None = None) -> bytes:
    """A half message for group G on TranTest as JSON, padded with spaces to ``size`` bytes."""
    body = json.dumps({"producer_group": "G", "topic": "TranTest", "body": "order 42 paid"})
    data = body.encode()
    if size is not None:
        data += b" " * (size - len(data))
    return data


def api_headers(token: str, **extra: str) -> dict[str, str]:
    return {
        "host": "127.0.0.1",
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        **extra,
    }


# --- a Content-Length over the limit -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_content_length_over_the_limit_is_refused_before_any_byte_is_read(limit, producer_token):
    scope = http_scope(
        "/api/v1/transactions",
        api_headers(producer_token, **{"content-length": str(50 * 1024 * 1024)}),
    )

    exchange = call(application, scope, long_body())

    error = assert_too_large(exchange, limit)
    assert error["details"]["size"] == 50 * 1024 * 1024
    assert exchange.messages_pulled == 0
    assert exchange.bytes_pulled == 0
    assert not Transaction.objects.exists()


# --- bodies counted while they stream -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(limit, producer_token):
    scope = http_scope("/api/v1/transactions", api_headers(producer_token))

    exchange = call(application, scope, long_body())

    error = assert_too_large(exchange, limit)
    assert "size" not in error["details"]
    # The message that passed the limit is the last one pulled: 10 messages fill the limit
    # exactly, the 11th passes it, nothing after it is read.
    assert exchange.messages_pulled == LIMIT // CHUNK + 1
    assert exchange.bytes_pulled == LIMIT + CHUNK
    assert not Transaction.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_body_longer_than_its_content_length_says_is_still_stopped_at_the_limit(
    limit, producer_token
):
    """An ASGI server is trusted to hold a body to its Content-Length, but the count does not
    depend on it."""
    scope = http_scope(
        "/api/v1/transactions", api_headers(producer_token, **{"content-length": "10"})
    )

    exchange = call(application, scope, long_body(size=4096))

    assert_too_large(exchange, limit)
    assert exchange.bytes_pulled == 3 * 4096


def test_the_application_behind_the_limit_never_gets_a_byte_past_it(limit):
    """What the limit hands on: every byte up to the limit, then a disconnect; the message that
    passed the limit is not handed on, and whatever the application sends after the 413 is
    dropped."""
    seen: list[dict[str, Any]] = []

    async def inner(scope, receive, send):
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})

    exchange = call(BodyLimitMiddleware(inner), http_scope("/anything", {}), long_body(size=3000))

    assert_too_large(exchange, limit)
    handed_on = [m for m in seen if m["type"] == "http.request"]
    assert sum(len(m["body"]) for m in handed_on) == 9000 <= LIMIT
    assert seen[-1] == {"type": "http.disconnect"}
    assert [m["type"] for m in exchange.sent] == ["http.response.start", "http.response.body"]
    assert b"late" not in exchange.body


def test_without_a_limit_every_byte_is_handed_on(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None
    received = bytearray()

    async def inner(scope, receive, send):
        more = True
        while more:
            message = await receive()
            received.extend(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    body = b"y" * 50_000
    exchange = call(BodyLimitMiddleware(inner), http_scope("/anything", {}), chunks_of(body))

    assert exchange.status == 204
    assert bytes(received) == body


# --- chunked bodies are read ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_chunked_half_message_is_read_whole_and_stored(limit, producer_token):
    """The defect: with no Content-Length, DRF took the body as empty and answered 400
    "producer_group, topic required"."""
    scope = http_scope("/api/v1/transactions", api_headers(producer_token))

    exchange = call(application, scope, chunks_of(half_body(), size=7))

    assert exchange.status == 201, exchange.body
    stored = Transaction.objects.get(transaction_id=exchange.json()["transaction_id"])
    assert stored.producer_group == "G"


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not(
    limit, producer_token
):
    scope = http_scope("/api/v1/transactions", api_headers(producer_token))

    at_limit = call(application, scope, chunks_of(half_body(LIMIT)))
    over_limit = call(application, scope, chunks_of(half_body(LIMIT + 1)))

    assert at_limit.status == 201, at_limit.body
    assert at_limit.bytes_pulled == LIMIT
    assert_too_large(over_limit, limit)
    assert Transaction.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_content_length_body_of_exactly_the_limit_is_accepted(limit, producer_token):
    scope = http_scope(
        "/api/v1/transactions", api_headers(producer_token, **{"content-length": str(LIMIT)})
    )

    exchange = call(application, scope, chunks_of(half_body(LIMIT)))

    assert exchange.status == 201, exchange.body


@pytest.mark.django_db(transaction=True)
def test_a_chunked_admin_request_is_read_too(limit):
    _, token = access_key_create(name="owner", is_admin=True)
    body = json.dumps({"name": "Chunked", "queue_nums": 2}).encode()

    exchange = call(
        application, http_scope("/api/v1/topics", api_headers(token)), chunks_of(body, size=5)
    )

    assert exchange.status == 201, exchange.body
    assert Topic.objects.get(name="Chunked").queue_nums == 2


@pytest.mark.django_db(transaction=True)
def test_a_request_without_a_body_still_has_no_content_length(limit, producer_token):
    """A GET with no body is not given a CONTENT_LENGTH of its own (nothing to measure)."""
    scope = http_scope("/api/v1/transactions", api_headers(producer_token), method="GET")

    exchange = call(application, scope, chunks_of(b""))

    assert exchange.status == 200, exchange.body


# --- other scopes ---------------------------------------------------------------------------


@pytest.mark.parametrize("scope_type", ["websocket", "lifespan"])
def test_other_scopes_pass_untouched(limit, scope_type):
    calls: list[tuple[Any, Any, Any]] = []

    async def inner(scope, receive, send):
        calls.append((scope, receive, send))

    async def receive():
        return {"type": "websocket.receive", "bytes": b"z" * (LIMIT * 2)}

    async def send(message):
        pass

    scope = {"type": scope_type, "path": "/ws/transactions/", "headers": []}
    async_to_sync(BodyLimitMiddleware(inner))(scope, receive, send)

    assert calls == [(scope, receive, send)]

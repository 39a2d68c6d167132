"""How the web process serves HTTP (``halfmoon.serving``): long polls to the ASGI handler,
everything else to a WSGI application on a bounded pool of threads, each body read whole first
and a chunked body's length stated."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync

from halfmoon.body_limit import _long_poll_last_segments, is_long_poll
from halfmoon.serving import BufferedWSGI, HTTPSplit


def scope(path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An HTTP/1.1 POST scope as uvicorn builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"a=1",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def serve(app: Any, request_scope: dict[str, Any], chunks: list[bytes]) -> list[dict[str, Any]]:
    """Run one request through ``app``, the body in ``chunks``; the messages it sent."""
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # the client keeps the connection open
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async_to_sync(app)(request_scope, receive, send)
    return sent


class EchoWSGI:
    """A WSGI application answering 201 with what it saw; counts the requests inside it."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.inside = 0
        self.most_inside = 0
        self.closed_in: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        time.sleep(self.hold_s)
        body = environ["wsgi.input"].read()
        seen = (
            f"{environ['PATH_INFO']}?{environ['QUERY_STRING']} "
            f"{environ.get('CONTENT_LENGTH')} {body.decode()} {threading.current_thread().name}"
        )
        with self.lock:
            self.inside -= 1
        start_response("201 Created", [("Content-Type", "text/plain"), ("X-Seen", "yes")])
        app = self

        class Body(list):
            def close(self) -> None:
                app.closed_in.append(threading.current_thread().name)

        return Body([seen.encode()])


class RecordingASGI:
    """An ASGI application that answers 200 with the body it received."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})


def test_a_sync_view_runs_in_a_pool_thread_with_the_whole_body_and_one_answer():
    wsgi = EchoWSGI()
    split = HTTPSplit(RecordingASGI(), wsgi_app=wsgi, threads=2)

    sent = serve(split, scope("/api/v1/transactions"), [b"hel", b"lo"])

    start, body = sent
    assert start["status"] == 201
    assert (b"x-seen", b"yes") in start["headers"]
    assert body["more_body"] is False
    path_query, length, text, thread = body["body"].decode().split(" ")
    assert (path_query, length, text) == ("/api/v1/transactions?a=1", "5", "hello")
    assert thread.startswith("wsgi")
    assert wsgi.closed_in == [thread]  # Django's request_finished runs in the same thread


def test_a_long_poll_goes_to_the_asgi_handler():
    asgi = RecordingASGI()
    split = HTTPSplit(asgi, wsgi_app=EchoWSGI(), threads=1)

    sent = serve(split, scope("/api/v1/consumer-groups/CG/receive"), [b'{"topic":', b'"T"}'])

    assert asgi.paths == ["/api/v1/consumer-groups/CG/receive"]
    assert sent[-1]["body"] == b'{"topic":"T"}'


def test_only_the_long_poll_routes_are_long_polls():
    """``is_long_poll`` resolves only paths ending as a long-poll route does; the others are
    answered without resolving, and the answer is the same as resolving would give."""
    assert _long_poll_last_segments() == {"receive", "check-requests"}
    assert is_long_poll("/api/v1/consumer-groups/CG/receive")
    assert is_long_poll("/api/v1/producer-groups/G/check-requests")
    for path in (
        "/api/v1/transactions",
        "/api/v1/transactions/receive",  # a transaction id "receive": its detail, no long poll
        "/api/v1/consumer-groups/CG/receive/",
        "/api/v1/consumer-groups/CG/ack",
        "/console/",
        "/nowhere/receive",
    ):
        assert not is_long_poll(path), path


def test_a_large_body_is_spooled_to_disk_not_held_in_memory(settings):
    """Past FILE_UPLOAD_MAX_MEMORY_SIZE the body waits for its thread in a file, as Django's
    ASGI handler spools it; the application still reads all of it."""
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1000
    seen: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        stream = environ["wsgi.input"]
        seen["on_disk"] = getattr(stream, "_rolled", None)
        seen["body"] = stream.read()
        start_response("200 OK", [])
        return [b""]

    split = HTTPSplit(RecordingASGI(), wsgi_app=app, threads=1)

    serve(split, scope("/x"), [b"y" * 700, b"z" * 700])

    assert seen == {"on_disk": True, "body": b"y" * 700 + b"z" * 700}


def test_a_chunked_body_gets_its_length_and_an_empty_one_none():
    wsgi = EchoWSGI()
    split = HTTPSplit(RecordingASGI(), wsgi_app=wsgi, threads=1)

    chunked = serve(split, scope("/x"), [b"ab", b"cd", b"e"])
    empty = serve(split, scope("/x"), [b""])
    declared = serve(split, scope("/x", {"content-length": "3"}), [b"abc"])

    assert chunked[-1]["body"].decode().split(" ")[1] == "5"
    assert empty[-1]["body"].decode().split(" ")[1] == "None"
    assert declared[-1]["body"].decode().split(" ")[1] == "3"


def test_no_more_requests_than_threads_run_at_once():
    wsgi = EchoWSGI(hold_s=0.05)
    buffered = BufferedWSGI(wsgi, threads=2)

    async def one() -> None:
        async def send(message: dict[str, Any]) -> None:
            pass

        await buffered.respond(scope("/x", {"content-length": "1"}), io.BytesIO(b"x"), send)

    async def many() -> None:
        await asyncio.gather(*(one() for _ in range(8)))

    async_to_sync(many)()

    assert wsgi.most_inside == 2


def test_an_error_around_django_is_the_contracts_500_with_a_logged_request_id(caplog):
    """A failure outside Django's handlers (here a response header that does not encode as
    HTTP headers must) is answered with the contract's JSON 500, whose request id names the
    logged traceback, never the server's plain-text 500."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [("X-Name", "caf\u00e9 \u2615")])
        return [b"ok"]

    split = HTTPSplit(RecordingASGI(), wsgi_app=app, threads=1)

    with caplog.at_level(logging.ERROR, logger="halfmoon.serving"):
        sent = serve(split, scope("/api/v1/topics"), [b""])

    start, body = sent
    assert start["status"] == 500
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    answer = json.loads(body["body"])["error"]
    assert answer["code"] == "internal_error"
    rid = answer["details"]["request_id"]
    assert headers[b"x-request-id"] == rid.encode()
    (record,) = [r for r in caplog.records if r.name == "halfmoon.serving"]
    assert f"request_id={rid}" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is UnicodeEncodeError

"""How the web process serves HTTP (``halfmoon.serving``): every request to a WSGI application on
a bounded pool of threads, each body read whole first and a chunked body's length stated; a long
poll that found nothing waits in the event loop, holding no thread, and its later reads are one
hop each (``PollContinuation``, against the real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse

from broker.plumbing import wakeup_listeners
from broker.plumbing.polling import (
    CONTINUATION_ENVIRON_KEY,
    WAKEUP_HUB_ENVIRON_KEY,
    PollContinuation,
)
from broker.plumbing.wakeup_listeners import wakeup_hub
from broker.plumbing.wakeups import topic_channel, wakeup_publish
from halfmoon.serving import BufferedWSGI, PooledHTTP


def scope(path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An HTTP/1.1 POST scope as uvicorn builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
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


async def never_gone() -> dict[str, Any]:
    """An ASGI ``receive`` after the body of a client that stays connected."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def test_a_sync_view_runs_in_a_pool_thread_with_the_whole_body_and_one_answer():
    wsgi = EchoWSGI()
    split = PooledHTTP(wsgi_app=wsgi, threads=2)

    sent = serve(split, scope("/api/v1/transactions"), [b"hel", b"lo"])

    start, body = sent
    assert start["status"] == 201
    assert (b"x-seen", b"yes") in start["headers"]
    assert body["more_body"] is False
    path_query, length, text, thread = body["body"].decode().split(" ")
    assert (path_query, length, text) == ("/api/v1/transactions?a=1", "5", "hello")
    assert thread.startswith("wsgi")
    assert wsgi.closed_in == [thread]  # Django's request_finished runs in the same thread


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

    split = PooledHTTP(wsgi_app=app, threads=1)

    serve(split, scope("/x"), [b"y" * 700, b"z" * 700])

    assert seen == {"on_disk": True, "body": b"y" * 700 + b"z" * 700}


def test_a_chunked_body_gets_its_length_and_an_empty_one_none():
    wsgi = EchoWSGI()
    split = PooledHTTP(wsgi_app=wsgi, threads=1)

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

        await buffered.respond(
            scope("/x", {"content-length": "1"}), io.BytesIO(b"x"), never_gone, send
        )

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

    split = PooledHTTP(wsgi_app=app, threads=1)

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


def test_a_path_that_does_not_encode_reaches_the_application_replaced_not_a_500():
    wsgi = EchoWSGI()

    sent = serve(PooledHTTP(wsgi_app=wsgi, threads=1), scope("/x/\udcff"), [b""])

    assert sent[0]["status"] == 201
    path_info = sent[-1]["body"].decode().split("?")[0]  # PEP 3333: UTF-8 bytes as latin-1
    assert path_info.encode("latin-1").decode("utf-8") == "/x/\ufffd"


# --- Long polls: the wait in the event loop -----------------------------------------------------

CHANNEL = topic_channel("ServingTest")


class LongPollWSGI:
    """A WSGI application standing for a long-poll view whose first read found nothing: it
    answers ``[]`` and hands the server a ``PollContinuation`` of ``wait_s`` whose retry
    answers ``{"found": n}`` (n: the retries so far) once ``found`` is set, else None. Any
    other path answers ``other`` at once. ``before_return`` runs after the generation is
    taken, as the first read would."""

    def __init__(self, wait_s: float, before_return: Any = None) -> None:
        self.wait_s = wait_s
        self.before_return = before_return
        self.found = threading.Event()
        self.retries: list[str] = []

    def retry(self) -> HttpResponse | None:
        self.retries.append(threading.current_thread().name)
        if not self.found.is_set():
            return None
        answer = HttpResponse(
            json.dumps({"found": len(self.retries)}), content_type="application/json", status=200
        )
        answer["Content-Length"] = "2"  # stale, as on a view's response after CommonMiddleware
        return answer

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"] != "/poll":
            start_response("200 OK", [("Content-Length", "5")])
            return [b"other"]
        hub = environ[WAKEUP_HUB_ENVIRON_KEY]
        generation = hub.generation(CHANNEL)
        if self.before_return is not None:
            self.before_return(hub)
        environ[CONTINUATION_ENVIRON_KEY] = PollContinuation(
            retry=self.retry,
            channel=CHANNEL,
            deadline=time.monotonic() + self.wait_s,
            generation=generation,
            key="G",
        )
        start_response(
            "200 OK",
            [("Content-Type", "text/plain"), ("Content-Length", "2"), ("X-Frame-Options", "DENY")],
        )
        return [b"[]"]


@contextlib.asynccontextmanager
async def _subscribed_hub() -> AsyncIterator[Any]:
    """The event loop's hub, subscribed; closed at the end."""
    hub = wakeup_hub()
    hub.start()
    await asyncio.wait_for(hub.subscribed.wait(), 5)
    try:
        yield hub
    finally:
        await hub.close()


async def _request(app: Any, path: str, receive: Any = never_gone) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    first = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive_after_body() -> dict[str, Any]:
        return first.pop() if first else await receive()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope(path), receive_after_body, send)
    return sent


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def _timed_poll(app: Any) -> tuple[list[dict[str, Any]], float]:
    """One ``/poll`` request through ``app`` with a subscribed hub: what it sent, and how long
    it took (s)."""

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        async with _subscribed_hub():
            started = time.monotonic()
            sent = await asyncio.wait_for(_request(app, "/poll"), 45)
            return sent, time.monotonic() - started

    return async_to_sync(scenario)()


@pytest.fixture
def slow_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's re-check tick every 120 s (``HELD_RECHECK_S``, 5 s in production), so an answer
    within 30 s was woken, not re-read, however loaded the machine."""
    monkeypatch.setattr(wakeup_listeners, "HELD_RECHECK_S", 120.0)


def test_a_long_poll_waits_holding_no_thread_and_a_wakeup_brings_its_retrys_answer(
    slow_recheck,
):
    wsgi = LongPollWSGI(wait_s=60)
    app = PooledHTTP(wsgi_app=wsgi, threads=1)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
        async with _subscribed_hub() as hub:
            poll = asyncio.ensure_future(_request(app, "/poll"))
            await _until(lambda: hub.waiting() == 1)
            other = await asyncio.wait_for(_request(app, "/other"), 30)  # the one thread is free
            wsgi.found.set()
            woken = time.monotonic()
            await asyncio.to_thread(wakeup_publish, [CHANNEL])
            answer = await asyncio.wait_for(poll, 45)
            return answer, other, time.monotonic() - woken

    answer, other, after_s = async_to_sync(scenario)()

    assert other[-1]["body"] == b"other"
    start, body = answer
    headers = dict(start["headers"])
    assert (start["status"], json.loads(body["body"])) == (200, {"found": 1})
    assert [v for n, v in start["headers"] if n == b"content-length"] == [
        str(len(body["body"])).encode()
    ]
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"x-frame-options"] == b"DENY"  # the first answer's middleware headers stay
    assert len(wsgi.retries) == 1 and wsgi.retries[0].startswith("wsgi")
    assert after_s < 30  # woken, not the 60 s deadline


def test_a_long_poll_answers_its_first_answer_at_the_deadline_without_another_read(
    slow_recheck,
):
    wsgi = LongPollWSGI(wait_s=0.4)
    app = PooledHTTP(wsgi_app=wsgi, threads=1)

    (start, body), took_s = _timed_poll(app)

    assert (start["status"], body["body"]) == (200, b"[]")
    assert wsgi.retries == []
    assert 0.4 <= took_s < 30  # at its deadline, not at a re-check


def test_a_wakeup_between_the_first_read_and_the_wait_is_not_missed(slow_recheck):
    """The commit's wake-up arrives after the first read but before the server waits: the
    channel's generation has moved since the read, so the server reads again at once."""

    def published_and_seen(hub: Any) -> None:
        before = hub.generation(CHANNEL)
        wakeup_publish([CHANNEL])
        deadline = time.monotonic() + 5
        while hub.generation(CHANNEL) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        wsgi.found.set()

    wsgi = LongPollWSGI(wait_s=60, before_return=published_and_seen)
    app = PooledHTTP(wsgi_app=wsgi, threads=1)

    (start, body), took_s = _timed_poll(app)

    assert json.loads(body["body"]) == {"found": 1}
    assert took_s < 30  # read again at once, not at the 60 s deadline


def test_a_client_gone_while_its_long_poll_waits_gets_nothing_and_no_more_reads():
    wsgi = LongPollWSGI(wait_s=10)
    app = PooledHTTP(wsgi_app=wsgi, threads=1)

    async def scenario() -> tuple[list[dict[str, Any]], int]:
        gone = asyncio.Event()

        async def disconnect() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async with _subscribed_hub() as hub:
            poll = asyncio.ensure_future(_request(app, "/poll", receive=disconnect))
            await _until(lambda: hub.waiting() == 1)
            gone.set()
            sent = await asyncio.wait_for(poll, 5)
            waiting = hub.waiting()
            await asyncio.to_thread(wakeup_publish, [CHANNEL])
            await asyncio.sleep(0.3)
            return sent, waiting

    sent, waiting = async_to_sync(scenario)()

    assert sent == []
    assert waiting == 0
    assert wsgi.retries == []

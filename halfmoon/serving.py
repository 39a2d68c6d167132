"""How the web process serves HTTP: every view through Django's WSGI handler on a small pool of
threads, the long polls' waits in the event loop.

One ASGI server (uvicorn) serves everything behind one address, websockets through Channels
and HTTP through ``PooledHTTP``: Django's WSGI handler on ``HALFMOON_WEB_THREADS`` threads per
process, reused from request to request (``BufferedWSGI``). A request runs in one thread from
its first middleware to its response; a long poll that finds nothing gives its thread back and
waits on the process's ``WakeupHub`` (``broker.plumbing.polling.poll_continue``). The body is
read whole first (``BodyLimitMiddleware`` bounds it) and a chunked one gets a
``Content-Length``.

Why WSGI inside ASGI: docs/design.md "Serving the API"; more: docs/design.md, "Module notes",
halfmoon/serving.py."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import io
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

from a2wsgi.wsgi import build_environ
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpResponseBase

from broker.plumbing.polling import (
    ARRIVED_ENVIRON_KEY,
    CONTINUATION_ENVIRON_KEY,
    WAKEUP_HUB_ENVIRON_KEY,
    poll_continue,
)
from broker.plumbing.request_id import REQUEST_ID_HEADER
from broker.plumbing.wakeup_listeners import WakeupHub, wakeup_hub
from halfmoon.body_limit import declared_content_length

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def body_read(receive: Receive) -> tempfile.SpooledTemporaryFile | None:
    """The whole request body, from ``http.request`` messages until one without
    ``more_body``, in a file positioned at its start: in memory up to
    ``FILE_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB), on disk past it, as Django's ASGI handler spools
    it, so a thousand slow uploads do not hold a thousand bodies in memory. None when the
    client disconnected first (or the body limit in front refused the body: it then hands on
    ``http.disconnect``)."""
    body = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE)  # noqa: SIM115 - the caller closes it
    while True:
        message = await receive()
        if message["type"] != "http.request":
            body.close()
            return None
        body.write(message.get("body", b""))
        if not message.get("more_body", False):
            body.seek(0)
            return body


def with_content_length(scope: Scope, size: int) -> Scope:
    """``scope`` with a ``Content-Length: size`` header when it declared none and ``size`` is
    not 0 (a request without a body keeps having no length, as it came)."""
    if size == 0 or declared_content_length(scope) is not None:
        return scope
    return {**scope, "headers": [*scope.get("headers", ()), (b"content-length", b"%d" % size)]}


def with_encodable_path(scope: Scope) -> Scope:
    """``scope`` with a path that encodes as UTF-8 (PEP 3333's environ needs it): lone
    surrogates (an ASGI server that decodes with ``surrogateescape``) become U+FFFD, as uvicorn
    decodes an invalid percent-escape. Such a path then matches no route: 404, not 500."""
    path = scope["path"]
    if path.isascii():
        return scope
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        fixed = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in path)
        return {**scope, "path": fixed}
    return scope


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
T = TypeVar("T")
_GONE = object()


async def _unless_disconnected(waiting: Awaitable[T], receive: Receive) -> T | object:
    """``waiting``'s result, or ``_GONE`` (``waiting`` cancelled) if the client disconnects
    first: after the body, the next ASGI message is ``http.disconnect``."""
    wait = asyncio.ensure_future(waiting)
    gone = asyncio.ensure_future(receive())
    try:
        await asyncio.wait({wait, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait, gone):
            if not task.done():
                task.cancel()
    if wait.done() and not wait.cancelled():
        return wait.result()
    await asyncio.gather(wait, return_exceptions=True)
    return _GONE


def _answer_parts(
    response: HttpResponseBase, first: list[tuple[bytes, bytes]]
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, ASGI headers and body of a long poll's later answer (rendered in a pool
    thread): the first answer's headers (those the middleware added: security headers,
    ``Vary``) with the new answer's own and its length in place of theirs."""
    content = response.content
    own = [
        (name.lower().encode("latin1"), value.encode("latin1"))
        for name, value in response.items()
        if name.lower() != "content-length"  # the first answer's, set by CommonMiddleware
    ]
    replaced = {name for name, _ in own} | {b"content-length"}
    headers = [(name, value) for name, value in first if name not in replaced]
    headers += [*own, (b"content-length", b"%d" % len(content))]
    return response.status_code, headers, content


class BufferedWSGI:
    """Run a WSGI application for ASGI HTTP requests whose body is already read, on a pool of
    ``threads`` threads, answering with the whole response at once.

    a2wsgi's ``WSGIMiddleware`` hands every body read and every response message across
    threads (``run_coroutine_threadsafe``, five hops for a small JSON answer), which
    costs a large share of a web worker's CPU under load. Here the WSGI environ is a2wsgi's
    (``build_environ``, PEP 3333) with the body read before (``body_read``), the application runs to the end of
    its response in one thread, and one hop brings status, headers and body back. Every
    response of this project is small and none streams (static files are served before it), so
    nothing is lost by not streaming.

    Args:
        app: the WSGI application (Django's ``WSGIHandler``).
        threads: the size of the thread pool.
    """

    def __init__(self, app: WSGIApp, threads: int) -> None:
        self.app = app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wsgi")

    async def respond(
        self,
        scope: Scope,
        body: IO[bytes],
        receive: Receive,
        send: Send,
        *,
        arrived: float | None = None,
        hub: WakeupHub | None = None,
    ) -> None:
        """Serve one HTTP request whose whole body is ``body`` (a file at its start, its
        length stated in ``scope``'s headers): the application runs in a pool thread, then
        its answer goes out in two messages.

        ``arrived`` (``time.monotonic()`` seconds) and ``hub`` (the event loop's
        ``WakeupHub``) go into the environ (``broker.plumbing.polling``'s keys): a long poll
        whose first read found nothing hands back a ``PollContinuation``, and its wait is
        done here in the event loop (``poll_continue``), each further read one hop to a pool
        thread, until it answers, its deadline passes or the client disconnects (read from
        ``receive``: nothing is then sent, and no further read is made)."""
        environ = build_environ(scope, body)  # type: ignore[arg-type]
        if arrived is not None:
            environ[ARRIVED_ENVIRON_KEY] = arrived
        if hub is not None:
            environ[WAKEUP_HUB_ENVIRON_KEY] = hub
        status, headers, content = await self.in_thread(functools.partial(self._respond, environ))
        continuation = environ.get(CONTINUATION_ENVIRON_KEY)
        if continuation is not None and hub is not None:
            answer = await _unless_disconnected(
                poll_continue(continuation, hub, self.in_thread), receive
            )
            if answer is _GONE:
                return
            if answer is not None:
                status, headers, content = _answer_parts(answer, headers)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content, "more_body": False})

    async def in_thread(self, function: Callable[[], T]) -> T:
        """``function()`` run in a pool thread, in a copy of the caller's context."""
        call = contextvars.copy_context().run
        return await asyncio.get_running_loop().run_in_executor(self.executor, call, function)

    def _respond(self, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Run the application in this (pool) thread: (status code, ASGI headers, body)."""
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            started[:] = [status, headers]  # nothing is sent yet: a later call replaces it
            return chunks.append

        iterable = self.app(environ, start_response)
        try:
            chunks.extend(iterable)
        finally:
            getattr(iterable, "close", lambda: None)()  # Django's request_finished
        status, headers = started
        encoded = [
            (n.strip().lower().encode("latin1"), v.strip().encode("latin1")) for n, v in headers
        ]
        return int(status.split(" ", 1)[0]), encoded, b"".join(chunks)


class PooledHTTP:
    """The HTTP application of ``halfmoon.asgi``: every request to Django's WSGI handler on
    ``threads`` threads, long polls waiting in the event loop (see the module docstring).

    Args:
        wsgi_app: the WSGI application; default Django's ``WSGIHandler``.
        threads: threads serving ``wsgi_app`` in this process; default
            ``settings.HALFMOON_WEB_THREADS``.
    """

    def __init__(self, wsgi_app: WSGIApp | None = None, threads: int | None = None) -> None:
        self.threads = threads if threads is not None else settings.HALFMOON_WEB_THREADS
        self.wsgi_app = BufferedWSGI(wsgi_app or WSGIHandler(), threads=self.threads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request (``scope["type"]`` ``http``: ``halfmoon.asgi`` routes the
        other scopes elsewhere).

        Django's handler answers every error of a view or a middleware itself (500 with
        ``details.request_id``, logged on ``django.request``). An error here, around it
        (the body's spooling, the environ, headers that do not encode, a long poll's later
        read that its view does not answer), would reach the server, whose own 500 is plain
        text that no log line names: it is logged with its traceback and a request id on
        ``halfmoon.serving`` and answered with the contract's 500 body carrying that id,
        unless the answer had already started."""
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._serve(scope, receive, tracked)
        except Exception:
            rid = uuid.uuid4().hex
            logger.exception(
                "request_id=%s %s %s failed outside Django's handlers",
                rid,
                scope.get("method"),
                scope.get("path"),
            )
            if started:
                raise
            await send_server_error(send, rid)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body, then hand the request to the WSGI handler's pool."""
        arrived = time.monotonic()
        body = await body_read(receive)
        if body is None:
            return  # gone, or refused by the body limit (which answered 413)
        hub = wakeup_hub()  # subscribes with its first waiter (``poll_continue``)
        with body:
            scope = with_content_length(with_encodable_path(scope), body.seek(0, io.SEEK_END))
            body.seek(0)
            await self.wsgi_app.respond(scope, body, receive, send, arrived=arrived, hub=hub)


async def send_server_error(send: Send, rid: str) -> None:
    """Answer 500 with the contract's error body (``broker.api.exceptions.internal_error_body``:
    ``internal_error``, ``details.request_id``) and the ``X-Request-ID`` header."""
    from broker.api.exceptions import internal_error_body  # the API's module: after set-up

    content = json.dumps(internal_error_body(rid)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(content)),
        (REQUEST_ID_HEADER.lower().encode(), rid.encode()),
    ]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": content, "more_body": False})

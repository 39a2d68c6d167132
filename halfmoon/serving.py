"""How the web process serves HTTP: the API's and the console's views through Django's WSGI
handler on a small pool of threads, the long polls through Django's ASGI handler.

Measured on these machines (``bench/throughput.py --serving-compare``, docs/operations.md
"Serving: what was measured"), a request through Django's ASGI handler costs about twice the
server CPU of the same request through its WSGI handler: under ASGI every sync view and sync
middleware hook is a ``sync_to_async`` hop into a thread made for that request, and as many
requests as are in flight each hold a pooled database connection, contending for the same
offset counters. WSGI servers are faster for the REST API, but the console's websockets and the
long polls (``POST /consumer-groups/{name}/receive``, ``GET /producer-groups/{name}/check-
requests`` with ``wait_ms`` up to 30 s) need ASGI: under WSGI each waiting request would hold a
whole worker.

So one ASGI server (uvicorn) serves everything behind one address, and ``HTTPSplit`` hands each
HTTP request to one of two Django handlers of the same project:

- a long poll (a view marked ``long_poll``, ``broker.api.views_poll``): Django's ASGI handler
  (``halfmoon.body_limit.ASGIHandler``), which waits holding no thread;
- everything else: Django's WSGI handler on ``HALFMOON_WEB_THREADS`` threads per process
  (default 4), reused from request to request (``BufferedWSGI``): a request runs in one thread
  from its first middleware to its response, as under a WSGI server, and at most that many
  requests per process hold a database connection at once.

Before either handler runs, the whole body is read (``BodyLimitMiddleware`` in front of this
bounds it, 413 past ``DATA_UPLOAD_MAX_MEMORY_SIZE``; spooled to disk past 2.5 MB) and, when the
client sent it chunked, its length is stated in a ``Content-Length`` header: Django's WSGI
request reads no body without one, and DRF decides from it whether there is a body at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from a2wsgi.wsgi import build_environ
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from halfmoon.body_limit import declared_content_length, is_long_poll
from halfmoon.request_id import REQUEST_ID_HEADER

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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


def body_replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands out ``body`` as one ``http.request`` message, then whatever
    ``receive`` says next (the client's ``http.disconnect``)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


def with_content_length(scope: Scope, size: int) -> Scope:
    """``scope`` with a ``Content-Length: size`` header when it declared none and ``size`` is
    not 0 (a request without a body keeps having no length, as it came)."""
    if size == 0 or declared_content_length(scope) is not None:
        return scope
    return {**scope, "headers": [*scope.get("headers", ()), (b"content-length", b"%d" % size)]}


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class BufferedWSGI:
    """Run a WSGI application for ASGI HTTP requests whose body is already read, on a pool of
    ``threads`` threads, answering with the whole response at once.

    a2wsgi's ``WSGIMiddleware`` hands every body read and every response message across
    threads (``run_coroutine_threadsafe``, five hops for a small JSON answer); measured under
    load that was a fifth of a web worker's CPU. Here the WSGI environ is a2wsgi's
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

    async def respond(self, scope: Scope, body: IO[bytes], send: Send) -> None:
        """Serve one HTTP request whose whole body is ``body`` (a file at its start, its
        length stated in ``scope``'s headers): the application runs in a pool thread, then
        its answer goes out in two messages."""
        environ = build_environ(scope, body)  # type: ignore[arg-type]
        call = contextvars.copy_context().run
        status, headers, content = await asyncio.get_running_loop().run_in_executor(
            self.executor, call, self._respond, environ
        )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content, "more_body": False})

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


class HTTPSplit:
    """The HTTP application of ``halfmoon.asgi``: long polls to ``asgi_app``, every other
    request to Django's WSGI handler on ``threads`` threads (see the module docstring).

    Args:
        asgi_app: Django's ASGI handler (``halfmoon.body_limit.ASGIHandler``), for long polls.
        wsgi_app: the WSGI application of the other requests; default Django's
            ``WSGIHandler``.
        threads: threads serving ``wsgi_app`` in this process; default
            ``settings.HALFMOON_WEB_THREADS``.
    """

    def __init__(
        self, asgi_app: ASGIApp, wsgi_app: WSGIApp | None = None, threads: int | None = None
    ) -> None:
        self.asgi_app = asgi_app
        self.threads = threads if threads is not None else settings.HALFMOON_WEB_THREADS
        self.wsgi_app = BufferedWSGI(wsgi_app or WSGIHandler(), threads=self.threads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request; other scopes (lifespan) go to the ASGI handler.

        Django's handlers answer every error of a view or a middleware themselves (500 with
        ``details.request_id``, logged on ``django.request``). An error here, around them
        (the body's spooling, the environ, headers that do not encode), would reach the
        server, whose own 500 is plain text that no log line names: it is logged with its
        traceback and a request id on ``halfmoon.serving`` and answered with the contract's
        500 body carrying that id, unless the answer had already started."""
        if scope["type"] != "http":
            await self.asgi_app(scope, receive, send)
            return
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
        """Read the body, then hand the request to the handler its path takes."""
        body = await body_read(receive)
        if body is None:
            return  # gone, or refused by the body limit (which answered 413)
        with body:
            scope = with_content_length(scope, body.seek(0, io.SEEK_END))
            body.seek(0)
            if is_long_poll(scope["path"]):
                await self.asgi_app(scope, body_replay(body.read(), receive), send)
            else:
                await self.wsgi_app.respond(scope, body, send)


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

"""Request bodies bounded while they stream, and chunked bodies read.

- ``BodyLimitMiddleware``: an ASGI middleware in front of the HTTP application that refuses a
  request body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with 413 ``request_too_large`` (the code the
  API's parser already answers, ``broker.api.parsers``) as soon as the bytes received pass the
  limit: a ``Content-Length`` over it before any byte is read, any other body (chunked, or
  longer than it said) on the message that passes it. Nothing past the limit is handed to the
  application, so Django never spools more than the limit (its ASGI handler reads the whole
  body into a temporary file before any view runs, with no limit of its own).
- A chunked body reaches the application read whole and with its ``Content-Length`` stated
  (``halfmoon.serving``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

from broker.api.exceptions import error_body
from broker.api.parsers import request_too_large

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


_DISCONNECT: Message = {"type": "http.disconnect"}


def body_limit_bytes() -> int | None:
    """The largest request body accepted, in bytes: ``settings.DATA_UPLOAD_MAX_MEMORY_SIZE``
    (``halfmoon.settings``: twice ``HALFMOON_MAX_MESSAGE_SIZE`` plus 1 MiB, for base64 bodies,
    properties and JSON framing). ``None`` means no limit, as in Django. Read on every request,
    so a test's ``settings`` override applies."""
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def declared_content_length(scope: Scope) -> int | None:
    """The request's ``Content-Length`` in bytes, or ``None`` when it sent none (a chunked body)
    or one that is not a non-negative integer (the ASGI server refuses those itself; the body is
    then counted like a chunked one). With several headers, the largest."""
    lengths = []
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.strip()
            if not text.isdigit():
                return None
            lengths.append(int(text))
    return max(lengths) if lengths else None


def too_large_response(limit: int, content_length: int | None) -> tuple[Message, Message]:
    """The 413's ``http.response.start`` and ``http.response.body`` messages: the contract's
    error body, code ``request_too_large``, ``details.limit`` (and
    ``details.size`` when the request declared one). ``Connection: close``: the rest
    of the body is never read, so the connection cannot carry another request."""
    error = request_too_large(content_length, limit)
    body = json.dumps(error_body(error.code, error.message, error.details)).encode()
    start: Message = {
        "type": "http.response.start",
        "status": 413,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ],
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


class BodyLimitMiddleware:
    """ASGI middleware: refuse an HTTP request body over ``limit()`` bytes with 413 as soon as
    the bytes received pass it, and hand the application nothing past the limit.

    - A ``Content-Length`` over the limit: answered at once, before the application runs and
      before any body byte is read.
    - Otherwise the ``http.request`` messages are counted as the application pulls them; the one
      that takes the total past the limit is not handed on: the 413 is sent, the application
      gets ``http.disconnect`` (Django's handler then stops reading and answers nothing), and
      whatever it sends afterwards is dropped. A body of exactly the limit passes.
    - Websocket and lifespan scopes go to the application untouched.

    Args:
        app: the HTTP application (Django behind servestatic in ``halfmoon.asgi``).
        limit: returns the limit in bytes, or ``None`` for none; default ``body_limit_bytes``.
    """

    def __init__(self, app: ASGIApp, limit: Callable[[], int | None] = body_limit_bytes) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit() if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = declared_content_length(scope)
        if declared is not None and declared > limit:
            for message in too_large_response(limit, declared):
                await send(message)
            return

        received = 0
        response_started = False
        refused = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                return _DISCONNECT
            message = await receive()
            if message["type"] != "http.request":
                return message
            received += len(message.get("body", b""))
            if received <= limit:
                return message
            refused = True
            if not response_started:
                for reply in too_large_response(limit, None):
                    await send(reply)
            return _DISCONNECT

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if refused and not response_started:
                return  # the 413 is the answer
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        await self.app(scope, limited_receive, guarded_send)

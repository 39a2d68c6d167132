"""Serve mode of back-checks: a small HTTP endpoint (``POST /check``) the broker calls at the
producer group's ``check_url`` (api-v1, "Back-check: broker to producer").

Each request's ``X-Halfmoon-Signature`` is verified with the group's ``check_secret`` before
the listener is asked; a missing or bad signature answers 401 and never reaches it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from halfmoon_client.messages import MessageView
from halfmoon_client.signing import SIGNATURE_HEADER, signature_valid
from halfmoon_client.states import LocalTransactionState

logger = logging.getLogger("halfmoon.client")

CHECK_PATH = "/check"
"""The path the check endpoint serves; ``check_url`` is ``http://host:port/check``."""
MAX_CHECK_BODY_BYTES = 8 * 1024 * 1024
"""Largest back-check body accepted (bytes): a 4 MiB message body as base64 plus properties."""


class CheckServer(ThreadingHTTPServer):
    """The check endpoint: one thread per back-check (daemon threads).

    Args:
        address: (host, port) to listen on; port 0 picks a free one (``server_address``).
        secret: returns the group's ``check_secret`` at request time (None or empty: every
            back-check gets 401), so the secret may be set after the server started.
        answer: asks the listener about one back-check; called from the request's thread.

    Raises:
        OSError: the address cannot be bound.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        secret: Callable[[], str | None],
        answer: Callable[[MessageView], LocalTransactionState],
    ) -> None:
        self.secret = secret
        self.answer = answer
        super().__init__(address, _CheckHandler)

    def signature_ok(self, raw: bytes, header: str | None) -> bool:
        """True if ``header`` signs ``raw`` with the current secret (False with no secret)."""
        secret = self.secret()
        return bool(secret) and signature_valid(secret, raw, header)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A broker that hung up mid-request (its check timed out): log, never print to stderr.
        logger.debug("check endpoint: error serving %s", client_address, exc_info=True)


class _CheckHandler(BaseHTTPRequestHandler):
    """``POST /check``: verify the signature, ask the listener, answer ``{"state": ...}``."""

    server: CheckServer
    server_version = "HalfmoonProducer/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        logger.debug("check endpoint: " + format, *args)

    def _answer(self, status: int, body: Mapping[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, code: str, message: str) -> None:
        self._answer(status, {"error": {"code": code, "message": message, "details": {}}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._error(405, "method_not_allowed", "Back-checks are POSTed.")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != CHECK_PATH:
            self._error(404, "not_found", f"No resource at {self.path}.")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "length_required", "A Content-Length header is required.")
            return
        if length < 0 or length > MAX_CHECK_BODY_BYTES:
            self._error(413, "too_large", "The check body is too large.")
            return
        raw = self.rfile.read(length)
        if not self.server.signature_ok(raw, self.headers.get(SIGNATURE_HEADER)):
            self._error(401, "bad_signature", f"Missing or bad {SIGNATURE_HEADER} header.")
            return
        try:
            view = MessageView.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError):
            self._error(400, "invalid_input", "The check body is not a back-check.")
            return
        state = self.server.answer(view)
        self._answer(200, {"state": state.value})

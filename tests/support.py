"""Helpers for the back-check, consumer, race and crash tests.

- ``CheckServer``: a real HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, port 0, in a daemon
  thread) standing in for a producer's ``check_url``. Its answer is programmable per request
  (``server.answer = lambda check: (200, {"state": "COMMIT_MESSAGE"})``; the function may sleep
  to force a timeout), it records every request it receives (raw body, parsed body, headers)
  and verifies the ``X-Halfmoon-Signature`` HMAC with the secrets it was told.
- ``prepare``: a PREPARED transaction through ``transaction_prepare``.
- ``round_at``: a full check round (claim, send, apply) on a half queue at a chosen time, so
  tests move the clock instead of sleeping.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from broker.models import Transaction
from broker.services import checks
from broker.services.transactions.half import transaction_prepare

Answer = tuple[int, Any]
"""(HTTP status, body): a dict or list is sent as JSON, bytes or str as they are."""


def expected_signature(secret: str, raw: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body keyed with the UTF-8 secret>`` (api-v1),
    computed here independently of the broker's own code."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), raw, hashlib.sha256).hexdigest()


@dataclass
class ReceivedCheck:
    """One request the check server received."""

    raw: bytes
    body: Any
    headers: dict[str, str]
    path: str
    signature_valid: bool | None
    """True or False when the server knew the group's secret, None when it did not."""

    @property
    def transaction_id(self) -> str | None:
        return self.body.get("transaction_id") if isinstance(self.body, dict) else None


class _CheckHTTPServer(ThreadingHTTPServer):
    """socketserver's default listen backlog is 5: a burst of parallel checks beyond it has its
    connections dropped, and the client's SYN retry then delays those checks by a second."""

    request_queue_size = 1024
    daemon_threads = True


@dataclass
class CheckServer:
    """A producer's check endpoint. Use as a context manager (or the ``check_server`` fixture)."""

    answer: Callable[[Any], Answer] = field(default=lambda check: (200, {"state": "UNKNOW"}))
    secrets: dict[str, str] = field(default_factory=dict)
    requests: list[ReceivedCheck] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> CheckServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if len(raw) < length:  # the sender went away mid-request (killed): none arrived
                    self.close_connection = True
                    return
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = None
                group = body.get("producer_group") if isinstance(body, dict) else None
                secret = server.secrets.get(group) if isinstance(group, str) else None
                signature = self.headers.get("X-Halfmoon-Signature", "")
                valid = (
                    None
                    if secret is None
                    else hmac.compare_digest(signature, expected_signature(secret, raw))
                )
                record = ReceivedCheck(
                    raw=raw,
                    body=body,
                    headers={k: v for k, v in self.headers.items()},
                    path=self.path,
                    signature_valid=valid,
                )
                with server._arrived:
                    server.requests.append(record)
                    server._arrived.notify_all()
                status, payload = server.answer(body)
                if isinstance(payload, (dict, list)):
                    data = json.dumps(payload).encode()
                    content_type = "application/json"
                elif isinstance(payload, str):
                    data = payload.encode()
                    content_type = "text/plain"
                else:
                    data = bytes(payload or b"")
                    content_type = "application/octet-stream"
                with contextlib.suppress(OSError):  # the client may have given up (timeout)
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._httpd = _CheckHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> CheckServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- reading what arrived ------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/check"

    def received(self) -> list[ReceivedCheck]:
        with self._lock:
            return list(self.requests)

    def received_ids(self) -> list[str | None]:
        return [r.transaction_id for r in self.received()]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[ReceivedCheck]:
        """Wait until at least ``count`` requests have arrived; return them."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.requests) >= count, timeout=timeout_s)
            return list(self.requests)


@contextlib.contextmanager
def check_server_running(
    answer: Callable[[Any], Answer] | None = None, secrets: dict[str, str] | None = None
) -> Iterator[CheckServer]:
    server = CheckServer(secrets=dict(secrets or {}))
    if answer is not None:
        server.answer = answer
    with server:
        yield server


def answer_state(state: str) -> Callable[[Any], Answer]:
    """An answer function replying 200 ``{"state": state}`` to every check."""
    return lambda check: (200, {"state": state})


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/check"


def prepare(
    *, producer_group: str = "G", topic: str = "TranTest", body: str = "hello", **kwargs: Any
) -> Transaction:
    """A new PREPARED transaction (half message) through the service."""
    tx, created = transaction_prepare(
        producer_group=producer_group, topic=topic, body=body.encode(), **kwargs
    )
    assert created
    return tx


def due_at(tx: Transaction) -> int:
    """When the first check of ``tx`` is due: birth plus its immunity (or the timeout)."""
    tx.refresh_from_db()
    return tx.born_timestamp + tx.check_immunity_ms


def round_at(half_queue_id: int, now: int) -> dict[str, Any]:
    """One check round on ``half_queue_id`` as if the clock read ``now`` (ms): claim, send the
    checks (HTTP and telemetry), apply their outcomes. Returns the jobs, outcomes and due count."""
    jobs, due = checks.check_claim(half_queue_id=half_queue_id, now=now)
    outcomes = checks.checks_deliver(jobs)
    checks.check_outcomes_apply(outcomes, now=now)
    return {"jobs": jobs, "outcomes": outcomes, "due": due}


def round_for(tx: Transaction, now: int) -> dict[str, Any]:
    """``round_at`` on the half queue of ``tx``."""
    return round_at(tx.half_queue_id, now)

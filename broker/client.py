"""A Python client for Halfmoon's HTTP API v1, modelled on RocketMQ's Java client.

This module needs only ``httpx`` and the standard library: it never imports Django, so an
application that produces or consumes messages can use it without the broker's code base.

- ``TransactionProducer`` mirrors ``org.apache.rocketmq.client.producer.TransactionMQProducer``:
  send a half message, run the local transaction, end it, and answer back-checks, either by
  serving a small HTTP endpoint (``check_mode="serve"``, the group's ``check_url``) or by
  long-polling the broker for check requests (``check_mode="poll"``).
- ``TransactionListener`` mirrors ``org.apache.rocketmq.client.producer.TransactionListener``.
- ``SimpleConsumer`` mirrors RocketMQ 5's SimpleConsumer
  (``org.apache.rocketmq.client.apis.consumer.SimpleConsumer``): receive with an invisible
  duration, then ack.
- ``HalfmoonAdmin`` covers the operator endpoints the demo needs (topics, groups).

Every non-2xx answer raises ``HalfmoonError`` with the contract's error body
(``{"error": {"code", "message", "details"}}``) and the HTTP status; a broker that cannot be
reached raises ``HalfmoonConnectionError`` (a ``HalfmoonError`` with ``status_code`` None).
Times are integers in milliseconds unless a name ends in ``_s``.

Example::

    class Listener(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            save_order(arg)
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg_view):
            return LocalTransactionState.COMMIT_MESSAGE if order_exists(msg_view.keys) else \\
                LocalTransactionState.ROLLBACK_MESSAGE

    with TransactionProducer(url, token, "G", Listener(), check_mode="poll") as producer:
        result = producer.send_message_in_transaction(Message("TranTest", "hello", tags="TagA"))
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx

from broker.signing import SIGNATURE_HEADER, sign_check_body, signature_valid

__all__ = [
    "CHECK_PATH",
    "SIGNATURE_HEADER",
    "HalfmoonAdmin",
    "HalfmoonConnectionError",
    "HalfmoonError",
    "LocalTransactionState",
    "Message",
    "MessageView",
    "SendResult",
    "SimpleConsumer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "sign_check_body",
]

logger = logging.getLogger("halfmoon.client")

CHECK_PATH = "/check"
DEFAULT_TIMEOUT_S = 10.0
# A back-check body carries at most a 4 MiB body as base64 plus its properties (api-v1 limits).
MAX_CHECK_BODY_BYTES = 8 * 1024 * 1024


# --- Errors -------------------------------------------------------------------------------------


class HalfmoonError(Exception):
    """A non-2xx answer of the broker, carrying the contract's error body.

    Attributes:
        status_code: the HTTP status (400, 401, 403, 404, 409, 413, ...), or None when the
            broker could not be reached (see ``HalfmoonConnectionError``).
        code: the snake_case error code, e.g. ``transaction_already_resolved``.
        message: one human sentence.
        details: the error's details object (e.g. ``{"state": "COMMITTED"}``).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status_code: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status_code = status_code
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        status = self.status_code if self.status_code is not None else "-"
        return f"[{status} {self.code}] {self.message}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> HalfmoonError:
        """Build the error from a non-2xx ``response``; a body that is not the contract's
        (a proxy's HTML page, say) gives code ``http_<status>`` and its first 200 characters."""
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            details = error.get("details")
            return cls(
                str(error.get("message") or ""),
                code=error["code"],
                status_code=response.status_code,
                details=details if isinstance(details, dict) else {},
            )
        return cls(
            response.text[:200] or f"HTTP {response.status_code}",
            code=f"http_{response.status_code}",
            status_code=response.status_code,
        )


class HalfmoonConnectionError(HalfmoonError):
    """The broker could not be reached, or did not answer in time (``status_code`` None)."""


# --- Values -------------------------------------------------------------------------------------


class LocalTransactionState(StrEnum):
    """The state of a local transaction (RocketMQ ``LocalTransactionState``).

    The spelling ``UNKNOW`` is RocketMQ's own.
    """

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def action(self) -> Literal["commit", "rollback", "unknown"]:
        """The ``action`` of ``POST /api/v1/transactions/{id}/end`` for this state."""
        if self is LocalTransactionState.COMMIT_MESSAGE:
            return "commit"
        if self is LocalTransactionState.ROLLBACK_MESSAGE:
            return "rollback"
        return "unknown"

    @classmethod
    def coerce(cls, value: Any) -> LocalTransactionState:
        """A listener's answer as a state: a member, or its name (``UNKNOWN`` accepted);
        anything else (None included) is ``UNKNOW``, as RocketMQ treats a null answer."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            name = value.upper()
            if name == "UNKNOWN":
                return cls.UNKNOW
            if name in cls.__members__:
                return cls[name]
        return cls.UNKNOW


def _body_bytes(data: Mapping[str, Any]) -> bytes:
    if data.get("body") is not None:
        return str(data["body"]).encode("utf-8")
    if data.get("body_base64") is not None:
        return base64.b64decode(data["body_base64"])
    return b""


@dataclass
class Message:
    """A message to send (RocketMQ ``org.apache.rocketmq.common.message.Message``).

    Args:
        topic: a user topic, e.g. ``"TranTest"``.
        body: ``str`` is sent as UTF-8 text (``body``), ``bytes`` as ``body_base64``.
        tags: one tag, e.g. ``"TagA"``.
        keys: a key, or several (a sequence is joined with spaces, RocketMQ's KEY_SEPARATOR).
        properties: user properties, string to string.
        msg_id: your own message id (= transaction id); sending the same id again for the
            same producer group stores nothing new (idempotent). None: the broker makes one.
        check_immunity_seconds: delay of the first back-check (RocketMQ
            CHECK_IMMUNITY_TIME_IN_SECONDS); at most 3600.

    After ``send_message_in_transaction`` succeeds, ``transaction_id`` holds the transaction
    id, as RocketMQ's ``msg.setTransactionId`` does before ``executeLocalTransaction``.
    """

    topic: str
    body: bytes | str
    tags: str = ""
    keys: str | Sequence[str] = ""
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str | None = None
    check_immunity_seconds: int | None = None
    transaction_id: str | None = None

    @property
    def keys_str(self) -> str:
        """``keys`` as the broker stores them: one string, keys separated by spaces."""
        if isinstance(self.keys, str):
            return self.keys
        return " ".join(self.keys)

    @property
    def body_bytes(self) -> bytes:
        """The body as bytes (a ``str`` body encoded as UTF-8)."""
        return self.body.encode("utf-8") if isinstance(self.body, str) else bytes(self.body)

    def to_json(self) -> dict[str, Any]:
        """The message fields of a send request (topic, tags, keys, body or body_base64,
        properties)."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "tags": self.tags,
            "keys": self.keys_str,
            "properties": dict(self.properties),
        }
        if isinstance(self.body, str):
            out["body"] = self.body
        else:
            out["body_base64"] = base64.b64encode(bytes(self.body)).decode("ascii")
        return out


@dataclass(frozen=True)
class MessageView:
    """A message as the broker shows it: received by a consumer, or in a back-check
    (RocketMQ ``MessageExt`` / RocketMQ 5 ``MessageView``).

    ``body`` is always bytes; ``text`` decodes it as UTF-8. Fields that one source does not
    carry are None: ``receipt_handle``, ``delivery_attempt``, ``queue_id``, ``queue_offset``
    and ``store_timestamp`` come with received messages; ``transaction_id``,
    ``producer_group``, ``check_times`` (counting this check, 1 on the first),
    ``commit_log_offset`` and ``half_queue_offset`` with back-checks. Timestamps are ms since
    the Unix epoch.
    """

    msg_id: str
    topic: str
    body: bytes
    tags: str = ""
    keys: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    transaction_id: str | None = None
    producer_group: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    born_timestamp: int | None = None
    store_timestamp: int | None = None
    delivery_attempt: int | None = None
    receipt_handle: str | None = None
    check_times: int | None = None
    commit_log_offset: int | None = None
    half_queue_offset: int | None = None

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    @property
    def key_list(self) -> list[str]:
        """``keys`` split on spaces."""
        return self.keys.split()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MessageView:
        """Parse a received message or a back-check body of api-v1.

        Raises:
            KeyError, ValueError: ``data`` lacks ``msg_id`` or ``topic``, or its base64 is bad.
        """
        return cls(
            msg_id=str(data["msg_id"]),
            topic=str(data["topic"]),
            body=_body_bytes(data),
            tags=str(data.get("tags") or ""),
            keys=str(data.get("keys") or ""),
            properties={str(k): str(v) for k, v in (data.get("properties") or {}).items()},
            transaction_id=data.get("transaction_id"),
            producer_group=data.get("producer_group"),
            queue_id=data.get("queue_id"),
            queue_offset=data.get("queue_offset"),
            born_timestamp=data.get("born_timestamp"),
            store_timestamp=data.get("store_timestamp"),
            delivery_attempt=data.get("delivery_attempt"),
            receipt_handle=data.get("receipt_handle"),
            check_times=data.get("check_times"),
            commit_log_offset=data.get("commit_log_offset"),
            half_queue_offset=data.get("half_queue_offset"),
        )


@dataclass(frozen=True)
class SendResult:
    """Result of a normal send (RocketMQ ``SendResult``)."""

    send_status: str
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int


@dataclass(frozen=True)
class TransactionSendResult:
    """Result of ``send_message_in_transaction`` (RocketMQ ``TransactionSendResult``).

    Attributes:
        send_status: ``"SEND_OK"`` (a failed half send raises instead).
        msg_id, transaction_id: equal (RocketMQ's UNIQ_KEY).
        commit_log_offset, half_queue_offset: where the half message is stored.
        created: False when the msg_id had been sent before (nothing new was stored).
        local_transaction_state: what ``execute_local_transaction`` answered (UNKNOW if it
            raised or returned something else).
        state: the transaction's state after end: ``COMMITTED``, ``ROLLED_BACK``,
            ``PREPARED`` (unknown: the back-check will ask) or ``DISCARDED``; None if end failed.
        queue_id, queue_offset: where the committed message went, when ``COMMITTED``.
        local_exception: the exception ``execute_local_transaction`` raised, if any.
        end_error: the error of the end call, if it failed. As in RocketMQ, that does not
            raise: the transaction stays PREPARED and the back-check resolves it.
    """

    send_status: str
    msg_id: str
    transaction_id: str
    commit_log_offset: int
    half_queue_offset: int
    created: bool
    local_transaction_state: LocalTransactionState
    state: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    local_exception: BaseException | None = None
    end_error: HalfmoonError | None = None


class TransactionListener(ABC):
    """Your local transaction and its back-check (RocketMQ ``TransactionListener``).

    ``check_local_transaction`` may be called from several threads at once (one per
    back-check), and concurrently with ``execute_local_transaction``: keep shared state
    thread-safe.
    """

    @abstractmethod
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction after the half message was stored.

        Args:
            msg: the message sent, with ``msg.transaction_id`` set.
            arg: the ``arg`` given to ``send_message_in_transaction``.

        Returns:
            COMMIT_MESSAGE, ROLLBACK_MESSAGE, or UNKNOW to let the back-check decide. An
            exception counts as UNKNOW.
        """

    @abstractmethod
    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        """Answer a back-check: what became of the local transaction of ``msg_view``?

        Args:
            msg_view: the half message, with ``transaction_id`` and ``check_times`` set.

        Returns:
            COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW (ask again later). An exception counts
            as UNKNOW.
        """


# --- HTTP ---------------------------------------------------------------------------------------


class _Api:
    """A thin JSON client: bearer token, contract errors as HalfmoonError."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, Any]:
        """Send one request; return (status, parsed JSON) of a 2xx answer.

        Raises:
            HalfmoonError: a non-2xx answer. HalfmoonConnectionError: no answer.
        """
        try:
            response = self._http.request(
                method,
                path,
                json=json_body,
                params=params,
                timeout=timeout_s if timeout_s is not None else self.timeout_s,
            )
        except httpx.TransportError as exc:
            raise HalfmoonConnectionError(
                f"{method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}",
                code="connection_error",
            ) from exc
        if not 200 <= response.status_code < 300:
            raise HalfmoonError.from_response(response)
        try:
            return response.status_code, response.json() if response.content else None
        except ValueError as exc:
            raise HalfmoonError(
                f"{method} {path} answered {response.status_code} with a body that is not JSON.",
                code="invalid_response",
                status_code=response.status_code,
            ) from exc

    def close(self) -> None:
        self._http.close()


def _seg(name: str) -> str:
    """A path segment: group names may hold ``%`` and ``|``."""
    return quote(name, safe="")


class _ClientBase:
    def __init__(self, base_url: str, token: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._base_url = base_url
        self._token = token
        self._timeout_s = timeout_s
        self._api = _Api(base_url, token, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._api.close()


class HalfmoonAdmin(_ClientBase):
    """Operator calls with an admin access key (RocketMQ ``MQAdminExt``, in part).

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an admin access key (``manage.py create_access_key NAME --admin``).
        timeout_s: per-request timeout in seconds.

    Every method raises ``HalfmoonError`` on a non-2xx answer.
    """

    def __enter__(self) -> HalfmoonAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", ...}``; raises HalfmoonError with 503."""
        return self._api.request("GET", "/healthz")[1]

    def create_topic(self, name: str, queue_nums: int = 4) -> dict[str, Any]:
        """``POST /api/v1/topics``: ``{"name", "queue_nums", "created_timestamp"}``; 409
        ``topic_exists`` if it exists."""
        return self._api.request(
            "POST", "/api/v1/topics", json_body={"name": name, "queue_nums": queue_nums}
        )[1]

    def get_topic(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/topics/{name}``: the topic with each queue's min and max offset."""
        return self._api.request("GET", f"/api/v1/topics/{_seg(name)}")[1]

    def create_producer_group(self, name: str, check_url: str | None = None) -> dict[str, Any]:
        """``POST /api/v1/producer-groups``: ``{"name", "check_url", "check_secret", ...}``. The
        ``check_secret`` that signs back-checks is shown in this answer only."""
        body = {"name": name, "check_url": check_url}
        return self._api.request("POST", "/api/v1/producer-groups", json_body=body)[1]

    def update_producer_group(self, name: str, check_url: str | None) -> dict[str, Any]:
        """``PATCH /api/v1/producer-groups/{name}``: change its ``check_url`` (None: its
        producers poll)."""
        return self._api.request(
            "PATCH", f"/api/v1/producer-groups/{_seg(name)}", json_body={"check_url": check_url}
        )[1]

    def get_producer_group(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/producer-groups/{name}`` (with ``unreachable_since``)."""
        return self._api.request("GET", f"/api/v1/producer-groups/{_seg(name)}")[1]

    def create_consumer_group(
        self, name: str, max_delivery_attempts: int | None = None
    ) -> dict[str, Any]:
        """``POST /api/v1/consumer-groups``: ``{"name", "max_delivery_attempts", ...}``."""
        body: dict[str, Any] = {"name": name}
        if max_delivery_attempts is not None:
            body["max_delivery_attempts"] = max_delivery_attempts
        return self._api.request("POST", "/api/v1/consumer-groups", json_body=body)[1]

    def get_transaction(self, transaction_id: str) -> dict[str, Any]:
        """``GET /api/v1/transactions/{id}``: ``{"transaction_id", "state", "check_times",
        "resolved_by", ...}``."""
        return self._api.request("GET", f"/api/v1/transactions/{_seg(transaction_id)}")[1]


# --- Producer -----------------------------------------------------------------------------------

CheckCallback = Callable[[MessageView, LocalTransactionState], None]


class _CheckServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    producer: TransactionProducer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A broker that hung up mid-request (its check timed out): log, never print to stderr.
        logger.debug("check endpoint: error serving %s", client_address, exc_info=True)


class _CheckHandler(BaseHTTPRequestHandler):
    """``POST /check``: verify the signature, ask the listener, answer ``{"state": ...}``."""

    server: _CheckServer
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
        producer = self.server.producer
        if not producer._signature_ok(raw, self.headers.get(SIGNATURE_HEADER)):
            self._error(401, "bad_signature", f"Missing or bad {SIGNATURE_HEADER} header.")
            return
        try:
            payload = json.loads(raw)
            view = MessageView.from_json(payload)
        except (ValueError, KeyError, TypeError, AttributeError):
            self._error(400, "invalid_input", "The check body is not a back-check.")
            return
        state = producer._answer_check(view)
        self._answer(200, {"state": state.value})


class TransactionProducer(_ClientBase):
    """A transactional producer (RocketMQ ``TransactionMQProducer``).

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key with this producer group (or an admin key).
        producer_group: the group the half messages are sent for.
        listener: runs local transactions and answers back-checks.
        check_mode: ``"serve"``: ``start()`` serves ``POST /check`` on
            ``check_host:check_port`` (0 picks a free port); register ``check_url`` on the
            group (``HalfmoonAdmin.create_producer_group`` / ``update_producer_group``).
            ``"poll"``: ``start()`` runs a thread that long-polls the group's check requests
            (the group must have no ``check_url``).
        check_host, check_port: where the check endpoint listens (serve mode).
        check_secret: the group's ``check_secret``; back-checks without a valid signature get
            401 and never reach the listener. Required in serve mode, settable after
            construction (``producer.check_secret = ...``) for a group created after ``start()``.
        on_check: called with (msg_view, answered state) after each back-check, e.g. to log it;
            its exceptions are logged and ignored.
        poll_wait_ms: ``wait_ms`` of each long poll (poll mode, 0-30000).
        timeout_s: per-request timeout in seconds.

    Use ``start()`` / ``shutdown()`` or ``with TransactionProducer(...) as producer:``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        producer_group: str,
        listener: TransactionListener,
        *,
        check_mode: Literal["serve", "poll"] = "serve",
        check_host: str = "127.0.0.1",
        check_port: int = 0,
        check_secret: str | None = None,
        on_check: CheckCallback | None = None,
        poll_wait_ms: int = 10_000,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if check_mode not in ("serve", "poll"):
            raise ValueError(f"check_mode must be 'serve' or 'poll', not {check_mode!r}")
        if not 0 <= poll_wait_ms <= 30_000:
            raise ValueError("poll_wait_ms must be between 0 and 30000")
        super().__init__(base_url, token, timeout_s=timeout_s)
        self.producer_group = producer_group
        self.listener = listener
        self.check_mode = check_mode
        self.check_host = check_host
        self.check_port = check_port
        self.check_secret = check_secret
        self.on_check = on_check
        self.poll_wait_ms = poll_wait_ms
        self._server: _CheckServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = False
        self._closed = False

    # lifecycle

    def start(self) -> None:
        """Start answering back-checks (serve: the HTTP endpoint; poll: the polling thread).

        Raises:
            RuntimeError: already started, or shut down (a producer is not restarted).
            OSError: the check port cannot be bound.
        """
        if self._started:
            raise RuntimeError("The producer is already started.")
        if self._closed:
            raise RuntimeError("The producer was shut down; make a new one.")
        if self.check_mode == "serve" and not self.check_secret:
            logger.warning("no check_secret yet: back-checks get 401 until it is set")
        self._stop.clear()
        if self.check_mode == "serve":
            server = _CheckServer((self.check_host, self.check_port), _CheckHandler)
            server.producer = self
            self._server = server
            self.check_port = server.server_address[1]
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"halfmoon-check-server-{self.producer_group}",
                daemon=True,
            )
        else:
            self._thread = threading.Thread(
                target=self._poll_loop,
                name=f"halfmoon-check-poll-{self.producer_group}",
                daemon=True,
            )
        self._thread.start()
        self._started = True

    def shutdown(self) -> None:
        """Stop answering back-checks and close connections. In poll mode this waits for the
        current long poll to return (at most ``poll_wait_ms`` plus the request timeout).
        Calling it again does nothing."""
        if self._closed:
            return
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=self.poll_wait_ms / 1000 + self._timeout_s + 1)
            self._thread = None
        self._started = False
        self._closed = True
        self.close()

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    @property
    def check_url(self) -> str:
        """``http://check_host:port/check`` of the running check endpoint (serve mode).

        Raises:
            RuntimeError: not in serve mode, or not started.
        """
        if self.check_mode != "serve" or self._server is None:
            raise RuntimeError("check_url exists once a serve-mode producer is started.")
        host = self.check_host
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        return f"http://{host}:{self.check_port}{CHECK_PATH}"

    # sending

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send a half message, run the local transaction, end the transaction
        (RocketMQ ``sendMessageInTransaction``).

        1. ``POST /api/v1/transactions`` stores the half message (invisible to consumers).
        2. On SEND_OK, ``listener.execute_local_transaction(msg, arg)`` runs with
           ``msg.transaction_id`` set; an exception or a non-state answer counts as UNKNOW.
        3. ``POST /api/v1/transactions/{id}/end`` reports commit, rollback or unknown. If
           this fails, the result carries ``end_error`` and the back-check decides later.

        Returns:
            a ``TransactionSendResult``.

        Raises:
            HalfmoonError: the half message was refused (e.g. 404 ``topic_not_found``, 403,
                413); the local transaction did not run.
        """
        body: dict[str, Any] = {"producer_group": self.producer_group, **msg.to_json()}
        if msg.msg_id is not None:
            body["msg_id"] = msg.msg_id
        if msg.check_immunity_seconds is not None:
            body["check_immunity_seconds"] = msg.check_immunity_seconds
        status, half = self._api.request("POST", "/api/v1/transactions", json_body=body)
        transaction_id = half["transaction_id"]
        msg.transaction_id = transaction_id

        local_exception: BaseException | None = None
        try:
            state = LocalTransactionState.coerce(self.listener.execute_local_transaction(msg, arg))
        except Exception as exc:  # RocketMQ catches Throwable: the back-check will decide
            logger.info("execute_local_transaction raised for %s", transaction_id, exc_info=True)
            state = LocalTransactionState.UNKNOW
            local_exception = exc

        remark = None
        if local_exception is not None:
            remark = f"executeLocalTransactionBranch exception: {local_exception!r}"[:1024]
        end: dict[str, Any] = {}
        end_error: HalfmoonError | None = None
        try:
            end = self.end_transaction(transaction_id, state, remark=remark)
        except HalfmoonError as exc:
            logger.warning(
                "local transaction %s is %s, but end failed: %s", transaction_id, state.value, exc
            )
            end_error = exc
        return TransactionSendResult(
            send_status=half.get("status", "SEND_OK"),
            msg_id=half["msg_id"],
            transaction_id=transaction_id,
            commit_log_offset=half["commit_log_offset"],
            half_queue_offset=half["half_queue_offset"],
            created=status == 201,
            local_transaction_state=state,
            state=end.get("state"),
            queue_id=end.get("queue_id"),
            queue_offset=end.get("queue_offset"),
            local_exception=local_exception,
            end_error=end_error,
        )

    def end_transaction(
        self,
        transaction_id: str,
        state: LocalTransactionState,
        *,
        from_transaction_check: bool = False,
        remark: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/v1/transactions/{id}/end`` (RocketMQ END_TRANSACTION).

        Returns:
            ``{"transaction_id", "state", ...}``; once COMMITTED also ``msg_id``, ``topic``,
            ``queue_id``, ``queue_offset``.

        Raises:
            HalfmoonError: 404 unknown id, 403 another group's transaction, 409
                ``transaction_already_resolved`` (``details["state"]``).
        """
        body = {
            "producer_group": self.producer_group,
            "action": state.action,
            "from_transaction_check": from_transaction_check,
            "remark": remark,
        }
        return self._api.request(
            "POST", f"/api/v1/transactions/{_seg(transaction_id)}/end", json_body=body
        )[1]

    def get_transaction(self, transaction_id: str) -> dict[str, Any]:
        """``GET /api/v1/transactions/{id}``: ``{"transaction_id", "state", "check_times",
        "resolved_by", "born_timestamp", "resolved_timestamp", ...}``.

        Raises:
            HalfmoonError: 404 unknown id, 403 another group's transaction.
        """
        return self._api.request("GET", f"/api/v1/transactions/{_seg(transaction_id)}")[1]

    def send(self, msg: Message) -> SendResult:
        """Send a normal message, visible to consumers at once (RocketMQ ``send``).

        Raises:
            HalfmoonError: e.g. 404 ``topic_not_found``, 413 too large.
        """
        body = {"producer_group": self.producer_group, **msg.to_json()}
        out = self._api.request("POST", "/api/v1/messages", json_body=body)[1]
        return SendResult(
            send_status=out["status"],
            msg_id=out["msg_id"],
            topic=out["topic"],
            queue_id=out["queue_id"],
            queue_offset=out["queue_offset"],
            commit_log_offset=out["commit_log_offset"],
        )

    # back-checks

    def _signature_ok(self, raw: bytes, provided: str | None) -> bool:
        return bool(self.check_secret) and signature_valid(self.check_secret, raw, provided)

    def _answer_check(self, view: MessageView) -> LocalTransactionState:
        """Ask the listener about one back-check (an exception counts as UNKNOW)."""
        try:
            state = LocalTransactionState.coerce(self.listener.check_local_transaction(view))
        except Exception:
            logger.warning(
                "check_local_transaction raised for %s", view.transaction_id, exc_info=True
            )
            state = LocalTransactionState.UNKNOW
        if self.on_check is not None:
            try:
                self.on_check(view, state)
            except Exception:
                logger.warning("on_check raised", exc_info=True)
        return state

    def _poll_loop(self) -> None:
        """Long-poll the group's check requests and answer each through end."""
        api = _Api(self._base_url, self._token, timeout_s=self._timeout_s)
        path = f"/api/v1/producer-groups/{_seg(self.producer_group)}/check-requests"
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    _, out = api.request(
                        "GET",
                        path,
                        params={"wait_ms": self.poll_wait_ms},
                        timeout_s=self.poll_wait_ms / 1000 + self._timeout_s,
                    )
                    failures = 0
                except HalfmoonError as exc:
                    failures += 1
                    delay = min(5.0, 0.2 * 2 ** min(failures, 5))
                    logger.warning(
                        "polling check requests failed (retry in %.1f s): %s", delay, exc
                    )
                    self._stop.wait(delay)
                    continue
                for request in (out or {}).get("check_requests", []):
                    self._answer_polled(api, request)
        finally:
            api.close()

    def _answer_polled(self, api: _Api, request: Mapping[str, Any]) -> None:
        try:
            view = MessageView.from_json(request)
        except (KeyError, ValueError, TypeError):
            logger.warning("malformed check request: %r", request)
            return
        state = self._answer_check(view)
        transaction_id = view.transaction_id or view.msg_id
        body = {
            "producer_group": self.producer_group,
            "action": state.action,
            "from_transaction_check": True,
            "remark": None,
        }
        try:
            api.request("POST", f"/api/v1/transactions/{_seg(transaction_id)}/end", json_body=body)
        except HalfmoonError as exc:
            logger.warning("answering the check of %s failed: %s", transaction_id, exc)


# --- Consumer -----------------------------------------------------------------------------------


class SimpleConsumer(_ClientBase):
    """A RocketMQ 5 ``SimpleConsumer``: receive a batch, process, ack each message.

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key with this consumer group (or an admin key).
        consumer_group: the group; every group sees every visible message of the topic.
        topic: the topic to receive from.
        timeout_s: per-request timeout in seconds (a long poll adds its ``wait_ms``).

    A message not acked within its invisible duration is delivered again with
    ``delivery_attempt`` + 1 and a new ``receipt_handle``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        consumer_group: str,
        topic: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s)
        self.consumer_group = consumer_group
        self.topic = topic

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def receive(
        self, max_messages: int = 32, invisible_duration_ms: int = 30_000, wait_ms: int = 0
    ) -> list[MessageView]:
        """``POST /api/v1/consumer-groups/{group}/receive``.

        Args:
            max_messages: 1-32.
            invisible_duration_ms: 10,000-43,200,000 ms; how long the messages stay hidden from
                the group's other receivers.
            wait_ms: 0-30,000 ms; how long to wait for a message when none is ready.

        Returns:
            the messages (possibly none), each with ``receipt_handle`` and ``delivery_attempt``.

        Raises:
            HalfmoonError: 400 a bound exceeded, 403, 404 unknown group or topic.
        """
        body = {
            "topic": self.topic,
            "max_messages": max_messages,
            "invisible_duration_ms": invisible_duration_ms,
            "wait_ms": wait_ms,
        }
        out = self._api.request(
            "POST",
            f"/api/v1/consumer-groups/{_seg(self.consumer_group)}/receive",
            json_body=body,
            timeout_s=wait_ms / 1000 + self._timeout_s,
        )[1]
        return [MessageView.from_json(m) for m in out.get("messages", [])]

    def ack(
        self, messages_or_handles: Iterable[MessageView | str]
    ) -> tuple[int, list[dict[str, str]]]:
        """``POST /api/v1/consumer-groups/{group}/ack``.

        Args:
            messages_or_handles: received ``MessageView``s or their receipt handles.

        Returns:
            (acked, failed): ``failed`` lists ``{"receipt_handle", "code"}`` for handles that
            were acked already or superseded by a redelivery. An empty input sends nothing.

        Raises:
            HalfmoonError: 400, 403.
        """
        handles: list[str] = []
        for item in messages_or_handles:
            handle = item.receipt_handle if isinstance(item, MessageView) else item
            if not handle:
                raise ValueError("Only received messages (with a receipt_handle) can be acked.")
            handles.append(handle)
        if not handles:
            return 0, []
        out = self._api.request(
            "POST",
            f"/api/v1/consumer-groups/{_seg(self.consumer_group)}/ack",
            json_body={"receipt_handles": handles},
        )[1]
        return int(out["acked"]), list(out.get("failed", []))

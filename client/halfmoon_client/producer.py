"""``TransactionProducer``: RocketMQ's ``TransactionMQProducer`` over HTTP.

Send a half message, run the local transaction, end it; answer back-checks either by serving
a small HTTP endpoint (``check_mode="serve"``, the group's ``check_url``, see
``check_server``) or by long-polling the broker for check requests (``check_mode="poll"``,
see ``check_poller``). Batches (api-v1 "Batches") are ``batch_sending``'s; with
``batch_linger_ms`` > 0, concurrent sends of several threads are gathered into batches
(``linger``); the steps they share are ``transaction_steps``.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any, Literal

from halfmoon_client.batcher import Batcher
from halfmoon_client.check_poller import CheckPoller
from halfmoon_client.check_server import CHECK_PATH, CheckServer
from halfmoon_client.errors import HalfmoonError
from halfmoon_client.linger import LingerSending
from halfmoon_client.listener import CheckCallback, TransactionListener
from halfmoon_client.messages import Message, MessageView, SendResult, TransactionSendResult
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transaction_steps import (
    half_body,
    local_transaction_run,
    normal_body,
    send_result,
    transaction_result,
)
from halfmoon_client.transport import (
    DEFAULT_BATCH_MAX_MESSAGES,
    DEFAULT_TIMEOUT_S,
    ClientBase,
    EventHooks,
    JsonApi,
    TransactionEnd,
    transaction_end,
)
from halfmoon_client.transport import path_segment as _seg

logger = logging.getLogger("halfmoon.client")


class TransactionProducer(LingerSending, ClientBase):
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
        batch_max_messages: items per batch request (``send_message_in_transaction_batch``,
            ``send_batch``, ``end_transactions``, and the gathered batches of linger mode); the
            broker's ``HALFMOON_BATCH_MAX_MESSAGES`` (default 128) is the most it takes, a
            larger value is split again to what the broker says.
        batch_linger_ms: 0 (default): each ``send_message_in_transaction`` sends alone. Above
            0: concurrent calls are gathered for up to this many ms after the first one (or
            until ``batch_max_messages``) into one ``POST /transactions/batch``, and their ends
            likewise into one ``POST /transactions/end-batch`` (Kafka's ``linger.ms``). A
            caller alone waits the linger time twice.
        event_hooks: httpx event hooks for every request (e.g. to log or count them).

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
        batch_max_messages: int = DEFAULT_BATCH_MAX_MESSAGES,
        batch_linger_ms: int = 0,
        event_hooks: EventHooks | None = None,
    ) -> None:
        if check_mode not in ("serve", "poll"):
            raise ValueError(f"check_mode must be 'serve' or 'poll', not {check_mode!r}")
        if not 0 <= poll_wait_ms <= 30_000:
            raise ValueError("poll_wait_ms must be between 0 and 30000")
        if batch_max_messages < 1:
            raise ValueError("batch_max_messages must be at least 1")
        if batch_linger_ms < 0:
            raise ValueError("batch_linger_ms must be 0 (off) or more")
        super().__init__(base_url, token, timeout_s=timeout_s, event_hooks=event_hooks)
        self.batch_max_messages = batch_max_messages
        self.batch_linger_ms = batch_linger_ms
        self.producer_group = producer_group
        self.listener = listener
        self.check_mode = check_mode
        self.check_host = check_host
        self.check_port = check_port
        self.check_secret = check_secret
        self.on_check = on_check
        self.poll_wait_ms = poll_wait_ms
        self._server: CheckServer | None = None
        self._server_thread: threading.Thread | None = None
        self._poller: CheckPoller | None = None
        self._started = False
        self._closed = False
        # Linger mode: the two batchers (made on the first send), and the callers between
        # their half send and their end's submission, which shutdown() waits for.
        self._linger_lock = threading.Condition()
        self._half_batcher: Batcher[dict[str, Any], tuple[int, Any]] | None = None
        self._end_batcher: Batcher[TransactionEnd, dict[str, Any]] | None = None
        self._linger_callers = 0
        self._linger_closing = False

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
        if self.check_mode == "serve":
            server = CheckServer(
                (self.check_host, self.check_port),
                secret=lambda: self.check_secret,
                answer=self._answer_check,
            )
            self._server = server
            self.check_port = server.server_address[1]
            self._server_thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"halfmoon-check-server-{self.producer_group}",
                daemon=True,
            )
            self._server_thread.start()
        else:
            api = JsonApi(
                self._base_url,
                self._token,
                timeout_s=self._timeout_s,
                event_hooks=self._event_hooks,
            )
            self._poller = CheckPoller(
                api,
                producer_group=self.producer_group,
                wait_ms=self.poll_wait_ms,
                answer=self._answer_check,
            )
            self._poller.start()
        self._started = True

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush the batches of linger mode, stop answering back-checks and close connections.

        In linger mode, new ``send_message_in_transaction`` calls are refused
        (``RuntimeError``), the half messages waiting to be sent are sent at once, the callers
        that are running their local transaction are waited for (at most ``timeout_s``
        seconds, None: the request timeout) and their ends sent at once: nothing queued is
        lost. A local transaction still running after that gets ``end_error``
        ``producer_shut_down`` and the back-check resolves it. In poll mode this waits for the
        current long poll to return (at most ``poll_wait_ms`` plus the request timeout).
        Calling it again does nothing.
        """
        if self._closed:
            return
        self._linger_flush(self._timeout_s if timeout_s is None else timeout_s)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._server_thread is not None:
            self._server_thread.join(timeout=self._timeout_s)
            self._server_thread = None
        if self._poller is not None:
            self._poller.stop(timeout_s=self.poll_wait_ms / 1000 + self._timeout_s + 1)
            self._poller = None
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

        With ``batch_linger_ms`` > 0, steps 1 and 3 go into the batches gathered from every
        thread (``POST /transactions/batch``, ``/transactions/end-batch``); step 2 runs in the
        calling thread; the result and the errors are the same as alone.

        Returns:
            a ``TransactionSendResult``.

        Raises:
            HalfmoonError: the half message was refused (e.g. 404 ``topic_not_found``, 403,
                413); the local transaction did not run.
            RuntimeError: linger mode, and the producer is shut down.
        """
        if self.batch_linger_ms > 0:
            return self._send_lingering(msg, arg)
        status, half = self._api.request(
            "POST", "/api/v1/transactions", json_body=half_body(self.producer_group, msg)
        )
        state, local_exception, end_request = local_transaction_run(self.listener, msg, arg, half)
        end: dict[str, Any] = {}
        end_error: HalfmoonError | None = None
        try:
            end = self.end_transaction(end_request.transaction_id, state, remark=end_request.remark)
        except HalfmoonError as exc:
            end_error = exc
        return transaction_result(status, half, state, local_exception, end, end_error)

    def end_transaction(
        self,
        transaction_id: str,
        state: LocalTransactionState,
        *,
        from_transaction_check: bool = False,
        remark: str | None = None,
    ) -> dict[str, Any]:
        """End a transaction of this group with ``state`` (RocketMQ END_TRANSACTION); the
        answer and errors are ``halfmoon_client.transport.transaction_end``'s (e.g. 409
        ``transaction_already_resolved``)."""
        return transaction_end(
            self._api,
            producer_group=self.producer_group,
            transaction_id=transaction_id,
            state=state,
            from_transaction_check=from_transaction_check,
            remark=remark,
        )

    def get_transaction(self, transaction_id: str) -> dict[str, Any]:
        """``GET /api/v1/transactions/{id}``: ``{"transaction_id", "state", "check_times",
        "resolved_by", "born_timestamp", "resolved_timestamp", ...}``.

        Raises:
            HalfmoonError: 404 unknown id, 403 another group's transaction.
        """
        return self._api.request("GET", f"/api/v1/transactions/{_seg(transaction_id)}")[1]

    def send(
        self,
        msg: Message,
        *,
        deliver_at: int | None = None,
        delay_level: int | None = None,
        message_group: str | None = None,
    ) -> SendResult:
        """Send a normal message (RocketMQ ``send``): visible to consumers at once, or, with
        ``deliver_at`` (ms since the epoch) or ``delay_level`` (RocketMQ's 1..18: 1s 5s 10s
        30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h), a delay message, stored now and
        delivered at that time; its result carries the ``recall_handle`` ``recall`` takes. A
        time now or past is an ordinary send. With ``msg.msg_id``, sending the same id again
        stores nothing new. ``message_group`` (or ``msg.message_group``) makes it a FIFO
        message: stored in its group's queue, consumed by a FIFO consumer group in send order.

        Raises:
            HalfmoonError: e.g. 404 ``topic_not_found``, 413 too large; 400
                ``illegal_delivery_time`` (more than the broker's maximum delay ahead, 3 days by
                default), ``illegal_delay_level``, ``delivery_time_conflict`` (both given),
                ``message_type_conflict`` (a message group and a delivery time),
                ``illegal_message_group`` or ``invalid_input`` (a blank message group, one
                over 64 characters or with a control character).
        """
        body = normal_body(self.producer_group, msg)
        if message_group is not None:
            body["message_group"] = message_group
        if deliver_at is not None:
            body["deliver_at"] = deliver_at
        if delay_level is not None:
            body["delay_level"] = delay_level
        return send_result(self._api.request("POST", "/api/v1/messages", json_body=body)[1])

    def recall(self, topic: str, recall_handle: str) -> dict[str, Any]:
        """Take back a delay message before its time (RocketMQ 5.3 ``recallMessage``): it is
        never delivered. ``recall_handle`` is its ``SendResult.recall_handle``. Recalling it
        again answers the same.

        Returns:
            the scheduled message (``POST /api/v1/scheduled-messages/recall``): ``{"msg_id",
            "topic", "state": "RECALLED", "delivery_timestamp", "recalled_by", ...}``.

        Raises:
            HalfmoonError: 409 ``recall_too_late`` once it is due or delivered
                (``details["state"]``), 404 ``scheduled_message_not_found``, 400
                ``invalid_recall_handle``, 403 another producer group's message.
        """
        body = {"topic": topic, "recall_handle": recall_handle}
        return self._api.request("POST", "/api/v1/scheduled-messages/recall", json_body=body)[1]

    # back-checks

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

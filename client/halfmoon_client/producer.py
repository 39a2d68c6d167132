"""``TransactionProducer``: RocketMQ's ``TransactionMQProducer`` over HTTP.

Send a half message, run the local transaction, end it; answer back-checks either by serving
a small HTTP endpoint (``check_mode="serve"``, the group's ``check_url``, see
``check_server``) or by long-polling the broker for check requests (``check_mode="poll"``,
see ``check_poller``).

Batches (api-v1 "Batches"): ``send_message_in_transaction_batch`` sends many half messages in
one request, runs each local transaction, and ends them all in one request; ``send_batch``
sends normal messages, ``end_transactions`` ends. With ``batch_linger_ms`` > 0, concurrent
``send_message_in_transaction`` calls of several threads are gathered into such batches
(``batcher``), each caller still getting its own result or exception.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Literal

from halfmoon_client.batcher import Batcher
from halfmoon_client.check_poller import CheckPoller
from halfmoon_client.check_server import CHECK_PATH, CheckServer
from halfmoon_client.errors import HalfmoonError
from halfmoon_client.listener import CheckCallback, TransactionListener
from halfmoon_client.messages import Message, MessageView, SendResult, TransactionSendResult
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transport import (
    DEFAULT_BATCH_MAX_MESSAGES,
    DEFAULT_TIMEOUT_S,
    BatchOutcome,
    ClientBase,
    EventHooks,
    JsonApi,
    TransactionEnd,
    batch_request,
    transaction_end,
    transaction_end_batch,
)
from halfmoon_client.transport import path_segment as _seg

logger = logging.getLogger("halfmoon.client")


class TransactionProducer(ClientBase):
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
        status, half = self._api.request("POST", "/api/v1/transactions", json_body=self._half(msg))
        state, local_exception, end_request = self._execute_local(msg, arg, half)
        end: dict[str, Any] = {}
        end_error: HalfmoonError | None = None
        try:
            end = self.end_transaction(end_request.transaction_id, state, remark=end_request.remark)
        except HalfmoonError as exc:
            end_error = exc
        return self._transaction_result(status, half, state, local_exception, end, end_error)

    def send_message_in_transaction_batch(
        self, msgs: Sequence[Message], arg: Any = None
    ) -> list[TransactionSendResult | HalfmoonError]:
        """Send many half messages, run each local transaction, end them all, with two
        requests per ``batch_max_messages`` messages (api-v1 "Batches").

        For each chunk of at most ``batch_max_messages``: ``POST /transactions/batch`` stores
        the half messages (one database transaction); then, in order, each stored one's
        ``listener.execute_local_transaction(msg, arg)`` runs with ``msg.transaction_id`` set
        (as ``send_message_in_transaction``); then one ``POST /transactions/end-batch``
        reports every answer (COMMIT_MESSAGE: commit, ROLLBACK_MESSAGE: rollback, UNKNOW:
        unknown).

        Args:
            msgs: the messages; idempotent per ``msg_id`` as the single send (an id sent
                before gives ``created`` False).
            arg: handed to every ``execute_local_transaction``.

        Returns:
            one item per message, in order: its ``TransactionSendResult`` (a failed end is its
            ``end_error``, as alone), or the ``HalfmoonError`` the single send would have
            raised for it (404 ``topic_not_found``, 409 ``duplicate_msg_id``, 413, ...; or the
            error of the whole request, e.g. a connection error, for each message of that
            request). A refused message runs no local transaction; the others proceed.
            Nothing is raised for a broker error.
        """
        results: list[TransactionSendResult | HalfmoonError] = []
        size = self.batch_max_messages
        for start in range(0, len(msgs), size):
            chunk = list(msgs[start : start + size])
            halves = self._post_halves([self._half(m) for m in chunk])
            ran: list[tuple[int, Any, LocalTransactionState, BaseException | None]] = []
            ends: list[TransactionEnd] = []
            for msg, outcome in zip(chunk, halves, strict=True):
                if isinstance(outcome, HalfmoonError):
                    continue
                state, local_exception, end_request = self._execute_local(msg, arg, outcome[1])
                ran.append((*outcome, state, local_exception))
                ends.append(end_request)
            answers = self.end_transactions(ends) if ends else []
            done = iter(zip(ran, answers, strict=True))
            for outcome in halves:
                if isinstance(outcome, HalfmoonError):
                    results.append(outcome)
                    continue
                (status, half, state, local_exception), answer = next(done)
                if isinstance(answer, HalfmoonError):
                    end, end_error = {}, answer
                else:
                    end, end_error = answer, None
                results.append(
                    self._transaction_result(status, half, state, local_exception, end, end_error)
                )
        return results

    def end_transactions(
        self, ends: Sequence[TransactionEnd]
    ) -> list[dict[str, Any] | HalfmoonError]:
        """End many transactions of this group (``POST /api/v1/transactions/end-batch``, one
        request per ``batch_max_messages`` ends; one database transaction each, rows locked
        in id order).

        Args:
            ends: ``TransactionEnd(transaction_id, state, remark=None,
                from_transaction_check=False)`` each.

        Returns:
            per end, in order: what ``end_transaction`` would return
            (``{"transaction_id", "state", ...}``), or the ``HalfmoonError`` it would have
            raised (404 unknown id, 403 another group's, 409 ``transaction_already_resolved``
            with ``details["state"]``). Nothing is raised for a broker error.
        """
        return transaction_end_batch(
            self._api,
            producer_group=self.producer_group,
            ends=ends,
            max_items=self.batch_max_messages,
        )

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

    def send(self, msg: Message) -> SendResult:
        """Send a normal message, visible to consumers at once (RocketMQ ``send``).

        Raises:
            HalfmoonError: e.g. 404 ``topic_not_found``, 413 too large.
        """
        body = {"producer_group": self.producer_group, **msg.to_json()}
        return _send_result(self._api.request("POST", "/api/v1/messages", json_body=body)[1])

    def send_batch(self, msgs: Sequence[Message]) -> list[SendResult | HalfmoonError]:
        """Send normal messages, visible to consumers at once (RocketMQ's batch send,
        ``POST /api/v1/messages/batch``, one request per ``batch_max_messages``).

        Returns:
            per message, in order: its ``SendResult``, or the ``HalfmoonError`` ``send`` would
            have raised for it (404 ``topic_not_found``, 413, ...; or the whole request's error
            for each message of that request). Nothing is raised for a broker error.
        """
        bodies = [{"producer_group": self.producer_group, **m.to_json()} for m in msgs]
        outcomes = batch_request(
            self._api,
            "/api/v1/messages/batch",
            "messages",
            bodies,
            max_items=self.batch_max_messages,
        )
        return [o if isinstance(o, HalfmoonError) else _send_result(o[1]) for o in outcomes]

    # sending: the shared steps

    def _half(self, msg: Message) -> dict[str, Any]:
        """The body of ``POST /transactions`` (and of a ``/transactions/batch`` item)."""
        body: dict[str, Any] = {"producer_group": self.producer_group, **msg.to_json()}
        if msg.msg_id is not None:
            body["msg_id"] = msg.msg_id
        if msg.check_immunity_seconds is not None:
            body["check_immunity_seconds"] = msg.check_immunity_seconds
        return body

    def _post_halves(self, bodies: list[dict[str, Any]]) -> list[BatchOutcome]:
        """``POST /transactions/batch`` of ``bodies``: per item ``(status, half)`` or its
        error (``batch_request``)."""
        return batch_request(
            self._api,
            "/api/v1/transactions/batch",
            "messages",
            bodies,
            max_items=self.batch_max_messages,
        )

    def _execute_local(
        self, msg: Message, arg: Any, half: dict[str, Any]
    ) -> tuple[LocalTransactionState, BaseException | None, TransactionEnd]:
        """Run the local transaction of the stored half message ``half`` (RocketMQ
        ``executeLocalTransaction``, ``msg.transaction_id`` set first); an exception or an
        answer that is no state counts as UNKNOW.

        Returns:
            (the state, the exception raised or None, the end to report).
        """
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
        return state, local_exception, TransactionEnd(transaction_id, state, remark)

    @staticmethod
    def _transaction_result(
        status: int,
        half: dict[str, Any],
        state: LocalTransactionState,
        local_exception: BaseException | None,
        end: dict[str, Any],
        end_error: HalfmoonError | None,
    ) -> TransactionSendResult:
        """The ``TransactionSendResult`` of a half send answered ``status`` / ``half``, a
        local transaction answering ``state``, and an end answered ``end`` (or failed)."""
        if end_error is not None:
            logger.warning(
                "local transaction %s is %s, but end failed: %s",
                half["transaction_id"],
                state.value,
                end_error,
            )
        return TransactionSendResult(
            send_status=half.get("status", "SEND_OK"),
            msg_id=half["msg_id"],
            transaction_id=half["transaction_id"],
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

    # sending: linger mode

    def _batchers(
        self,
    ) -> tuple[Batcher[dict[str, Any], tuple[int, Any]], Batcher[TransactionEnd, dict[str, Any]]]:
        """The half and end batchers, made on first use; the caller holds ``_linger_lock``."""
        if self._half_batcher is None or self._end_batcher is None:
            linger_s = self.batch_linger_ms / 1000
            self._half_batcher = Batcher(
                self._post_halves,
                linger_s=linger_s,
                max_items=self.batch_max_messages,
                name=f"halfmoon-half-batcher-{self.producer_group}",
            )
            self._end_batcher = Batcher(
                self.end_transactions,
                linger_s=linger_s,
                max_items=self.batch_max_messages,
                name=f"halfmoon-end-batcher-{self.producer_group}",
            )
        return self._half_batcher, self._end_batcher

    def _send_lingering(self, msg: Message, arg: Any) -> TransactionSendResult:
        """``send_message_in_transaction`` through the batchers (linger mode)."""
        with self._linger_lock:
            if self._linger_closing or self._closed:
                raise RuntimeError("The producer was shut down; make a new one.")
            half_batcher, end_batcher = self._batchers()
            # Queued under the lock: shutdown() closes the half batcher only after this.
            half_future = half_batcher.submit(self._half(msg))
            self._linger_callers += 1
        end_future: Future[dict[str, Any]] | None = None
        try:
            status, half = half_future.result()  # raises the error of this half message
            state, local_exception, end_request = self._execute_local(msg, arg, half)
            # RuntimeError: shutdown stopped waiting for this local transaction.
            with contextlib.suppress(RuntimeError):
                end_future = end_batcher.submit(end_request)
        finally:
            with self._linger_lock:
                self._linger_callers -= 1
                self._linger_lock.notify_all()
        end: dict[str, Any] = {}
        end_error: HalfmoonError | None = None
        if end_future is None:
            end_error = HalfmoonError(
                "The producer was shut down before this end was sent; the back-check decides.",
                code="producer_shut_down",
            )
        else:
            try:
                end = end_future.result()
            except HalfmoonError as exc:
                end_error = exc
        return self._transaction_result(status, half, state, local_exception, end, end_error)

    def _linger_flush(self, timeout_s: float) -> None:
        """Linger mode's part of ``shutdown``: refuse new sends, send the queued half
        messages, wait up to ``timeout_s`` s for the callers' ends, send them."""
        with self._linger_lock:
            self._linger_closing = True
            half_batcher, end_batcher = self._half_batcher, self._end_batcher
        if half_batcher is None or end_batcher is None:
            return
        end_batcher.drain()  # ends from now on are sent without waiting for others
        half_batcher.close()
        with self._linger_lock:
            if not self._linger_lock.wait_for(lambda: self._linger_callers == 0, timeout_s):
                logger.warning(
                    "shutdown: %d local transactions still running; the back-check will "
                    "resolve them",
                    self._linger_callers,
                )
        end_batcher.close()

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


def _send_result(out: dict[str, Any]) -> SendResult:
    """A ``SendResult`` from the answer of ``POST /messages`` (or a ``/messages/batch`` item)."""
    return SendResult(
        send_status=out["status"],
        msg_id=out["msg_id"],
        topic=out["topic"],
        queue_id=out["queue_id"],
        queue_offset=out["queue_offset"],
        commit_log_offset=out["commit_log_offset"],
    )

"""Linger mode of a ``TransactionProducer`` (``batch_linger_ms`` > 0): concurrent
``send_message_in_transaction`` calls of several threads are gathered into batches of half
messages and batches of ends (``batcher``), each caller still getting its own result or
exception; ``shutdown`` flushes them."""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future
from typing import Any

from halfmoon_client.batch_sending import BatchSending
from halfmoon_client.batcher import Batcher
from halfmoon_client.errors import HalfmoonError
from halfmoon_client.messages import Message, TransactionSendResult
from halfmoon_client.transaction_steps import (
    half_body,
    local_transaction_run,
    transaction_result,
)
from halfmoon_client.transport import TransactionEnd

logger = logging.getLogger("halfmoon.client")


class LingerSending(BatchSending):
    """The gathered sends of ``TransactionProducer``: its batchers call ``BatchSending``'s
    ``_post_halves`` and ``end_transactions``."""

    batch_linger_ms: int
    _closed: bool
    _linger_lock: threading.Condition
    _half_batcher: Batcher[dict[str, Any], tuple[int, Any]] | None
    _end_batcher: Batcher[TransactionEnd, dict[str, Any]] | None
    _linger_callers: int
    _linger_closing: bool

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
            half_future = half_batcher.submit(half_body(self.producer_group, msg))
            self._linger_callers += 1
            self._linger_lock.notify_all()  # a waiter on the count sees it (tests, shutdown)
        end_future: Future[dict[str, Any]] | None = None
        try:
            status, half = half_future.result()  # raises the error of this half message
            state, local_exception, end_request = local_transaction_run(
                self.listener, msg, arg, half
            )
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
        return transaction_result(status, half, state, local_exception, end, end_error)

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

"""``Batcher``: gathers items submitted from many threads into batches, as Kafka's producer
does with ``linger.ms`` and ``batch.size``; ``TransactionProducer`` uses two of them when
``batch_linger_ms`` > 0 (its half messages, then its ends).

A batch is flushed when it holds ``max_items`` items, or ``linger_s`` after its oldest item
was submitted, or at once after ``drain()`` / ``close()``. One background thread sends the
batches one after another; each submitter waits on its own ``Future``, which gets its own
outcome (a result, or an exception it raises as if it had sent alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

P = TypeVar("P")
R = TypeVar("R")

FlushFunction = Callable[[list[P]], Sequence[R | BaseException]]
"""Sends one batch: given the items, returns one outcome per item in order (a result, or the
exception of that item alone)."""


class Batcher(Generic[P, R]):
    """Gathers submitted items into batches sent by one background thread.

    Args:
        flush: sends one batch (``FlushFunction``); if it raises, every item of that batch
            gets that exception.
        linger_s: how long the oldest item waits for others, in seconds (> 0).
        max_items: a batch is sent as soon as it holds this many items (>= 1).
        name: the background thread's name.

    Raises:
        ValueError: ``linger_s`` <= 0 or ``max_items`` < 1.
    """

    def __init__(self, flush: FlushFunction, *, linger_s: float, max_items: int, name: str) -> None:
        if linger_s <= 0:
            raise ValueError("linger_s must be positive")
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self._flush = flush
        self._linger_s = linger_s
        self._max_items = max_items
        self._cond = threading.Condition()
        self._pending: list[tuple[P, Future[R], float]] = []
        self._draining = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: P) -> Future[R]:
        """Queue ``item`` for the next batch.

        Returns:
            a ``Future`` holding the item's result, or raising its exception.

        Raises:
            RuntimeError: the batcher is closed.
        """
        future: Future[R] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("The batcher is closed.")
            self._pending.append((item, future, time.monotonic()))
            self._cond.notify_all()
        return future

    def drain(self) -> None:
        """From now on send every batch at once, without lingering (items are still taken)."""
        with self._cond:
            self._draining = True
            self._cond.notify_all()

    def close(self, timeout_s: float | None = None) -> None:
        """Refuse new items, send every queued item at once, and wait for the background
        thread to end (at most ``timeout_s`` seconds, None: no limit). Calling it again
        only waits."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _next_batch(self) -> list[tuple[P, Future[R], float]] | None:
        """Wait for the next batch to be due and take it; None once closed and empty."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if not self._pending:
                return None
            while len(self._pending) < self._max_items and not (self._closed or self._draining):
                remaining = self._pending[0][2] + self._linger_s - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch = self._pending[: self._max_items]
            del self._pending[: self._max_items]
            return batch

    def _run(self) -> None:
        """The background thread: send batches until closed and empty."""
        while (batch := self._next_batch()) is not None:
            try:
                outcomes: Sequence[R | BaseException] = self._flush([item for item, _, _ in batch])
                if len(outcomes) != len(batch):
                    raise RuntimeError(
                        f"flush returned {len(outcomes)} outcomes for {len(batch)} items"
                    )
            except BaseException as exc:  # noqa: BLE001 - handed to every submitter
                outcomes = [exc] * len(batch)
            for (_, future, _), outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

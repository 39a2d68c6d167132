"""The broker's announcements of transaction changes, and the one helper that publishes them.

The broker publishes each change to the channel-layer group ``TRANSACTIONS_GROUP``; whoever
wants them (the console's websocket consumers) subscribes to that group and relays them. The
broker imports nothing of the console. Services call ``transaction_changes_publish`` through
``transaction.on_commit`` (``broker.services.transactions.events.transactions_announce``: one call for
all the transactions a statement changed) so nothing is
announced for a write that rolled back. Publishing never delays the request or task that caused
it: events go onto an in-process queue drained by one background thread with its own event loop
(so channels-redis keeps one connection pool), which sleeps ``LINGER_S`` after the first and
then sends everything queued meanwhile together in one channel-layer message (``transaction.events`` / ``bulk.progresses``, a list of events). The feed is best effort: an event the channel
layer cannot take is logged and dropped; the write itself is already durable. While Redis is
away, one warning says events are being dropped and another, with their count, when it is back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from channels.layers import get_channel_layer
from redis.exceptions import RedisError

logger = logging.getLogger("halfmoon.events")

TRANSACTIONS_GROUP = "broker.transactions"
BULK_ACTIONS_GROUP = "broker.bulk_actions"
QUEUE_LIMIT = 10_000  # writes whose events wait to be published; beyond it new ones are dropped
BATCH_LIMIT = 500
"""Most events sent in one channel-layer message: events queued while the previous message was
being sent go together (one Redis round trip and one consumer wake-up for a batch of 32
commits, not 64), so the feed keeps up with the broker's throughput."""
LINGER_S = 0.05
"""How long the publisher gathers events after the first of a message (s), like a Kafka
producer's ``linger.ms``: without it a busy web process sends a channel-layer message per
event or two, and the feed's thread takes a large share of the process's CPU (figures in
bench/README.md); an operator does not see 50 ms on the console."""


class TransactionChange(TypedDict):
    """``{"type": "transaction.event", ...}``: a transaction changed state or was checked."""

    type: Literal["transaction.event"]
    kind: str  # prepared | resolved | discarded | resumed | check_sent | check_undelivered
    # | check_requested (an operator's "check now")
    transaction_id: str
    producer_group: str
    topic: str
    state: str
    check_times: int
    timestamp: int


class BulkActionProgress(TypedDict):
    """``{"type": "bulk.progress", ...}``: a bulk operator action over a frozen set of
    transactions moved on (``state``: running | done; ``counts`` by per-transaction result:
    done, already_ended, failed)."""

    type: Literal["bulk.progress"]
    bulk_id: int
    action: str
    state: str
    total: int
    processed: int
    counts: dict[str, int]
    timestamp: int


Announcement = TransactionChange | BulkActionProgress


class _Publisher:
    """One daemon thread per process that sends queued events to the channel layer."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Sequence[Announcement]]] = queue.Queue(
            maxsize=QUEUE_LIMIT
        )
        self._pid: int | None = None
        self._lock = threading.Lock()

    def submit(self, group: str, events: Sequence[Announcement]) -> None:
        self._ensure_thread()
        try:
            self._queue.put_nowait((group, events))
        except queue.Full:
            logger.warning("announcement queue full: dropped %d events to %s", len(events), group)

    def _ensure_thread(self) -> None:
        # A forked child (Celery prefork) inherits no thread: start one per process id.
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                self._queue = queue.Queue(maxsize=QUEUE_LIMIT)
                threading.Thread(target=self._run, name="transaction-changes", daemon=True).start()
                self._pid = os.getpid()

    def _run(self) -> None:
        # Block in this daemon thread (an executor thread would keep the process from exiting)
        # and reuse one event loop, so channels-redis keeps one connection pool.
        loop = asyncio.new_event_loop()
        layer = get_channel_layer()
        dropped = 0  # events dropped since the channel layer stopped answering
        while True:
            group, events = self._queue.get()
            waiting = [(group, event) for event in events]
            # Sleep through the linger, then take whatever came meanwhile: the request threads'
            # submits do not wake this thread one by one (a GIL hand-off each).
            time.sleep(LINGER_S)
            while len(waiting) < BATCH_LIMIT:
                try:
                    group, events = self._queue.get_nowait()
                except queue.Empty:
                    break
                waiting.extend((group, event) for event in events)
            if layer is None:
                continue
            for group, message in announcements_coalesce(waiting):
                try:
                    loop.run_until_complete(layer.group_send(group, message))
                except (OSError, RedisError) as exc:
                    # Redis is away: say so once, not once per event, and again when it is back.
                    if not dropped:
                        logger.warning(
                            "events are dropped while the channel layer (Redis) does not "
                            "answer: %s",
                            exc,
                        )
                    dropped += len(message.get("events", [message]))
                    continue
                except Exception:  # noqa: BLE001 - best effort, see module docstring
                    logger.warning(
                        "could not publish %s to %s", message["type"], group, exc_info=True
                    )
                    continue
                if dropped:
                    logger.warning(
                        "the channel layer (Redis) answers again: %d events dropped", dropped
                    )
                    dropped = 0


def announcements_coalesce(
    waiting: list[tuple[str, Announcement]],
) -> list[tuple[str, dict[str, Any]]]:
    """The channel-layer messages for ``waiting`` (group, event) pairs, in order: one event
    alone as itself; several events of one group in a row as one ``{"type":
    "transaction.events", "events": [...]}`` (``TRANSACTIONS_GROUP``) or ``{"type":
    "bulk.progresses", "events": [...]}`` message, which subscribers relay one by one."""
    messages: list[tuple[str, dict[str, Any]]] = []
    for group, event in waiting:
        if messages and messages[-1][0] == group:
            last = messages[-1][1]
            if "events" not in last:
                last = {"type": f"{last['type']}s", "events": [last]}
                messages[-1] = (group, last)
            last["events"].append(event)
        else:
            messages.append((group, dict(event)))
    return messages


_publisher = _Publisher()


def transaction_changes_publish(events: Sequence[TransactionChange]) -> None:
    """Queue ``events`` for every subscriber of ``TRANSACTIONS_GROUP``
    (``broker.transactions``), in order.

    Returns at once; the background thread sends them.
    """
    if events:
        _publisher.submit(TRANSACTIONS_GROUP, events)


def bulk_action_progress_publish(event: BulkActionProgress) -> None:
    """Queue ``event`` for every subscriber of ``BULK_ACTIONS_GROUP`` (``broker.bulk_actions``).

    Returns at once; the background thread sends it.
    """
    _publisher.submit(BULK_ACTIONS_GROUP, [event])

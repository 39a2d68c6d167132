"""Long polling for receive and check-requests, without holding a database connection and,
under ASGI, without holding a thread (``broker.services.wakeups``).

A long poll reads the database, and while it finds nothing waits for a wake-up on its channel
(published after a commit made something visible), re-reading at the latest every
``HELD_RECHECK_S`` (5 s: redeliveries publish nothing) while subscribed, every
``FALLBACK_RECHECK_S`` (1 s) while Redis is away, never past ``wait_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

from broker.services.wakeups import SyncListener, wakeup_hub

T = TypeVar("T")


def _release_connection() -> None:
    # Between tries the connection goes back to the pool (or is closed): a waiting caller
    # holds none.
    if not connection.in_atomic_block:
        connection.close()


def _deadline(wait_ms: int, started: float | None) -> float:
    # wait_ms counts from the request's arrival (``started``, time.monotonic() seconds), so time
    # spent queued for a worker thread before the first read is not waited again on top.
    return (time.monotonic() if started is None else started) + wait_ms / 1000


def poll_until(
    fetch: Callable[[], list[T]], *, wait_ms: int, channel: str, started: float | None = None
) -> list[T]:
    """Blocking long poll (WSGI): call ``fetch`` until it returns something or ``wait_ms`` ms
    have passed since ``started`` (``time.monotonic()`` seconds when the request arrived;
    default: now), waiting between tries for a wake-up on ``channel`` (``wakeups``), at most
    ``listener.recheck_s()`` (5 s subscribed, 1 s while Redis is away). ``fetch`` runs at
    least once, and not again at the deadline unless a wake-up came (hundreds of waiters timing
    out together would otherwise all read at once; a redelivery due meanwhile waits for the
    next poll). Returns the last result (possibly empty); ``fetch``'s errors propagate. Holds the calling thread, and a Redis connection
    while it waits.
    """
    if wait_ms <= 0:
        return fetch()
    deadline = _deadline(wait_ms, started)
    with SyncListener(channel) as listener:  # subscribed before the first read: nothing missed
        while True:
            result = fetch()
            remaining = deadline - time.monotonic()
            if result or remaining <= 0:
                return result
            _release_connection()
            woken = listener.wait(min(listener.recheck_s(), remaining))
            if not woken and time.monotonic() >= deadline:
                return result  # nothing published since the last read: no read at the deadline


def _fetch_released(fetch: Callable[[], list[T]]) -> list[T]:
    try:
        return fetch()
    finally:
        _release_connection()


async def poll_until_async(
    fetch: Callable[[], list[T]], *, wait_ms: int, channel: str, started: float | None = None
) -> list[T]:
    """Async long poll (ASGI): as ``poll_until``, but each ``fetch`` runs in a worker thread of
    the event loop's shared pool (``sync_to_async(thread_sensitive=False)``, its database
    connection released after each try) and the wait between tries is an ``await`` on the
    process's ``WakeupHub``: a waiting caller holds no thread, no database connection and no
    Redis connection of its own. Returns the last result (possibly empty); ``fetch``'s errors
    propagate.
    """
    try_once = sync_to_async(_fetch_released, thread_sensitive=False)
    if wait_ms <= 0:
        return await try_once(fetch)
    deadline = _deadline(wait_ms, started)
    with wakeup_hub().listen(channel) as listener:  # before the first read: nothing missed
        while True:
            result = await try_once(fetch)
            remaining = deadline - time.monotonic()
            if result or remaining <= 0:
                return result
            woken = await listener.wait(min(listener.recheck_s(), remaining))
            if not woken and time.monotonic() >= deadline:
                return result  # as poll_until: no read at the deadline without a wake-up

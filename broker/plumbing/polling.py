"""Long polling for receive and check-requests, without holding a database connection and,
as ``halfmoon.serving`` serves them, without holding a thread (``broker.plumbing.wakeups``).

A long poll reads the database, and while it finds nothing waits for a wake-up on its channel
(published after a commit made something visible, or the re-check every ``HELD_RECHECK_S``,
5 s, for redeliveries, which publish nothing), every ``FALLBACK_RECHECK_S`` (1 s) while Redis
is away, never past ``wait_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection

from broker.plumbing.wakeup_listeners import SyncListener, WakeupHub

T = TypeVar("T")


def release_connection() -> None:
    """Between a long poll's reads: give the database connection back to the pool (or close
    it), unless inside an atomic block; a waiting caller holds none."""
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
            release_connection()
            woken = listener.wait(min(listener.recheck_s(), remaining))
            if not woken and time.monotonic() >= deadline:
                return result  # nothing published since the last read: no read at the deadline


ARRIVED_ENVIRON_KEY = "halfmoon.arrived"
"""The WSGI environ key under which ``halfmoon.serving`` gives the request's arrival
(``time.monotonic()`` seconds): a long poll's ``wait_ms`` counts from it, time queued for a
server thread included."""
WAKEUP_HUB_ENVIRON_KEY = "halfmoon.wakeup_hub"
"""The WSGI environ key under which ``halfmoon.serving`` hands a request its event loop's
``WakeupHub``: the server can wait for a long poll without a thread (``PollContinuation``)."""
CONTINUATION_ENVIRON_KEY = "halfmoon.long_poll"
"""The WSGI environ key under which a long-poll view hands the server its ``PollContinuation``
when its first read found nothing and time to wait remains."""


@dataclass(frozen=True)
class PollContinuation:
    """The rest of a long poll whose first read, in a server thread, found nothing: what the
    server waits for in its event loop (``poll_continue``), holding no thread.

    ``retry``: one more read, run in a server thread; returns the answer when it found
    something (or the read failed: its error answer), None when nothing yet (its database
    connection given back). ``channel``: the wake-up channel; ``deadline``: when the wait
    ends (``time.monotonic()`` seconds: the request's arrival plus its ``wait_ms``);
    ``generation``: the hub's ``WakeupHub.generation`` of ``channel`` taken before the first
    read (None: the hub was not subscribed then); ``key``: who competes for the same items
    (the consumer group of a receive, the producer group of a check-requests poll): the hub
    wakes one waiter per key (``WakeupHub``).
    """

    retry: Callable[[], Any | None]
    channel: str
    deadline: float
    generation: tuple[int, int] | None
    key: str


async def poll_continue(
    continuation: PollContinuation,
    hub: WakeupHub,
    in_thread: Callable[[Callable[[], Any | None]], Awaitable[Any | None]],
) -> Any | None:
    """Wait for ``continuation`` in the event loop: on each wake-up of its channel (a commit,
    or the hub's re-check tick; every 1 s on its own while Redis is away) run its
    ``retry`` through ``in_thread`` (one hop to a server thread), until a retry answers or the
    deadline passes. Returns the retry's answer, or None at the deadline (the first read's
    empty answer stands). As ``poll_until``, no read at the deadline without a wake-up.

    A wake-up published between the first read and the registration here is not missed: the
    channel's generation then differs from the one taken before that read, and the read is made
    again at once.
    """
    with hub.listen(continuation.channel, continuation.key) as listener:
        generation = hub.generation(continuation.channel)
        if generation is None or generation != continuation.generation:
            listener.event.set()
        while True:
            remaining = continuation.deadline - time.monotonic()
            if remaining <= 0:
                return None
            woken = await listener.wait(min(listener.recheck_s(), remaining))
            if not woken and time.monotonic() >= continuation.deadline:
                return None
            answer = await in_thread(continuation.retry)
            if answer is not None:
                listener.answered = True  # the wake-up goes on to another waiter of the key
                return answer

"""Listening for wake-ups (``broker.plumbing.wakeups`` publishes them): ``SyncListener`` for a
thread, ``Listener`` for an event loop, and ``WakeupHub``, one Redis pub/sub connection per
process shared by every waiting long poll (``wakeup_hub``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from types import TracebackType
from typing import Any

import redis
import redis.asyncio
from django.conf import settings
from redis.exceptions import RedisError

from broker.plumbing.wakeups import (
    FALLBACK_RECHECK_S,
    REDIS_TIMEOUT_S,
    _channel_prefix,
    logger,
)

HELD_RECHECK_S = 5.0
"""How often what publishes nothing (a redelivery after ``invisible_duration_ms``) is re-read
for while subscribed: a ``SyncListener`` waits at most this long; a ``WakeupHub`` wakes one
waiter per key this often. RocketMQ's ``PullRequestHoldService`` re-checks its held pull
requests every 5 s the same way, beside the message-arrival notification."""

SUBSCRIBED_TIMEOUT_S = 2.0
"""How long a ``SyncListener`` waits for Redis to confirm its SUBSCRIBE before going on
without wake-ups (re-reading every ``FALLBACK_RECHECK_S``)."""

_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WakeupHub] = weakref.WeakKeyDictionary()


class SyncListener:
    """Context manager: a blocking waiter on one channel with its own Redis connection
    (for WSGI, which holds a thread per request anyway). Subscribes on enter, so a wake-up
    published after the enter is never missed; without Redis, ``wait`` just sleeps."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self._pubsub: Any = None

    def __enter__(self) -> SyncListener:
        try:
            client = redis.Redis.from_url(
                settings.REDIS_URL,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=HELD_RECHECK_S + REDIS_TIMEOUT_S,
            )
            pubsub = client.pubsub()
            pubsub.subscribe(self.channel)
            self._pubsub = pubsub
            self._subscribed_wait()
        except (RedisError, OSError):
            self._close()
        return self

    def _subscribed_wait(self) -> None:
        """Block until Redis confirms the SUBSCRIBE (at most ``SUBSCRIBED_TIMEOUT_S``; else
        the listener goes on without Redis): a wake-up Redis reads before the SUBSCRIBE would
        be lost, and on a loaded machine the publisher's socket can be read first."""
        deadline = time.monotonic() + SUBSCRIBED_TIMEOUT_S
        while (remaining := deadline - time.monotonic()) > 0:
            message = self._pubsub.get_message(timeout=remaining)
            if message is not None and message["type"] == "subscribe":
                return
        logger.warning("no SUBSCRIBE confirmation from Redis: re-checking without wake-ups")
        self._close()

    def recheck_s(self) -> float:
        """The longest wait before the next database read: ``HELD_RECHECK_S`` while
        subscribed, ``FALLBACK_RECHECK_S`` without Redis (seconds)."""
        return HELD_RECHECK_S if self._pubsub is not None else FALLBACK_RECHECK_S

    def wait(self, timeout_s: float) -> bool:
        """Block until a wake-up on the channel or ``timeout_s`` seconds; True if woken."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if self._pubsub is None:
                time.sleep(remaining)
                return False
            try:
                message = self._pubsub.get_message(timeout=remaining)
            except (RedisError, OSError):
                self._close()
                continue
            if message is not None and message["type"] == "message":
                return True
        return False

    def drain(self) -> int:
        """Read the wake-ups already arrived without waiting; return how many."""
        read = 0
        while self._pubsub is not None:
            try:
                message = self._pubsub.get_message(timeout=0)
            except (RedisError, OSError):
                self._close()
                break
            if message is None:
                break
            read += message["type"] == "message"
        return read

    def _close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
                self._pubsub.connection_pool.disconnect()
            except (RedisError, OSError):
                pass
            self._pubsub = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()


class Listener:
    """One asyncio waiter of a ``WakeupHub``; use as a context manager (``WakeupHub.listen``).

    A wake-up that arrives while the caller is not waiting (e.g. during a database read) is
    kept: the next ``wait`` returns at once. ``key`` names the waiters that compete for the
    same items (the consumer group of a receive, the producer group of a check-requests poll):
    see ``WakeupHub``. Set ``answered`` when the read after a wake-up found something.
    """

    def __init__(self, hub: WakeupHub, channel: str, key: str) -> None:
        self.hub = hub
        self.channel = channel
        self.key = key
        self.event = asyncio.Event()
        self.answered = False

    def recheck_s(self) -> float:
        """The longest wait before the next database read (seconds): unbounded while the hub is
        subscribed (its re-check tick wakes one waiter per key every ``HELD_RECHECK_S``),
        ``FALLBACK_RECHECK_S`` while Redis is away."""
        return math.inf if self.hub.subscribed.is_set() else FALLBACK_RECHECK_S

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake-up on the channel, at most ``timeout_s`` seconds; True if woken."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout_s)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    def __enter__(self) -> Listener:
        self.hub._add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A wake-up not yet read for (its wait ended first) or one that found something (more
        # may have come with it) goes on to another waiter of the same key.
        self.hub._remove(self, pass_on=self.answered or self.event.is_set())


class WakeupHub:
    """One Redis pub/sub connection for every waiter of an event loop: ``PSUBSCRIBE
    halfmoon:wakeup:<db>:*``, each notification setting the events of its channel's waiters.

    One wake-up per key, not per waiter: of the waiters of a channel that compete for the same
    items (one ``key``: the same consumer group on a topic), one is woken, unless one of them
    has a wake-up it has not read for yet; the others would only find what the first took.
    A waiter that leaves with an unread wake-up, or whose read found something (a commit may
    have made several messages visible), passes the wake-up on to another waiter of its key.
    Every process subscribed wakes one waiter per key.

    What publishes nothing (a redelivery after ``invisible_duration_ms``) is re-checked the same
    way: every ``HELD_RECHECK_S`` while subscribed, the hub wakes one waiter per key of every
    channel (RocketMQ's ``PullRequestHoldService`` re-checks its held pulls every 5 s), so
    hundreds of waiters of one consumer group cost the database one read per 5 s, not hundreds.
    While Redis is away every waiter re-checks on its own every ``FALLBACK_RECHECK_S``.

    The subscriber task starts with the first ``listen`` and keeps the subscription while
    the loop runs (a wake-up costs each process one small read, waiters or not); when Redis is
    away it reconnects every ``FALLBACK_RECHECK_S`` and, once back, wakes every waiter
    (notifications may have been missed meanwhile).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.pattern = f"{_channel_prefix()}*"
        self.subscribed = asyncio.Event()
        self._waiters: dict[str, dict[Listener, None]] = {}  # per channel, in arrival order
        self._task: asyncio.Task[None] | None = None
        self._tick: asyncio.Task[None] | None = None
        self._failing = False
        # Wake-ups seen per channel since the subscription began, and how many subscriptions
        # began (``generation``): one entry per topic or producer group ever woken.
        self._seen: dict[str, int] = {}
        self._subscriptions = 0

    def start(self) -> None:
        """Start the subscriber and re-check tasks if they are not running (from the hub's
        event loop)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        if self._tick is None or self._tick.done():
            self._tick = asyncio.get_running_loop().create_task(self._recheck())

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(HELD_RECHECK_S)
            if self.subscribed.is_set():
                for listeners in list(self._waiters.values()):
                    self._wake_keys(listeners, None)

    def listen(self, channel: str, key: str | None = None) -> Listener:
        """A waiter on ``channel`` competing with the waiters of ``key`` (default: the
        channel); register it (``with``) before reading the database, or compare
        ``generation`` from before the read with the one after registering."""
        self.start()
        return Listener(self, channel, channel if key is None else key)

    def generation(self, channel: str) -> tuple[int, int] | None:
        """Which wake-ups of ``channel`` this hub has seen: (subscription number, wake-ups
        since it began), or None while it is not subscribed. Safe to call from any thread (a
        read of two ints under the GIL). A read made after taking a generation misses no
        commit whose wake-up comes later: if the generation, taken again once a waiter is
        registered, differs, something was published meanwhile and the read must be made
        again (``broker.plumbing.polling.poll_continue``)."""
        if not self.subscribed.is_set():
            return None
        return self._subscriptions, self._seen.get(channel, 0)

    def waiting(self) -> int:
        """How many waiters are registered."""
        return sum(len(listeners) for listeners in self._waiters.values())

    def _add(self, listener: Listener) -> None:
        self._waiters.setdefault(listener.channel, {})[listener] = None

    def _remove(self, listener: Listener, *, pass_on: bool = False) -> None:
        listeners = self._waiters.get(listener.channel)
        if listeners is None:
            return
        listeners.pop(listener, None)
        if not listeners:
            del self._waiters[listener.channel]
        elif pass_on:
            self._wake_keys(listeners, {listener.key})

    def _wake(self, channel: str) -> None:
        self._seen[channel] = self._seen.get(channel, 0) + 1
        listeners = self._waiters.get(channel)
        if listeners:
            self._wake_keys(listeners, None)

    @staticmethod
    def _wake_keys(listeners: dict[Listener, None], keys: set[str] | None) -> None:
        """Wake the longest-registered waiter of each key (of ``keys``; None: every key) among
        ``listeners`` unless one of that key already has an unread wake-up."""
        first: dict[str, Listener] = {}
        woken: set[str] = set()
        for listener in listeners:
            if keys is not None and listener.key not in keys:
                continue
            if listener.event.is_set():
                woken.add(listener.key)
            else:
                first.setdefault(listener.key, listener)
        for key, listener in first.items():
            if key not in woken:
                listener.event.set()

    def _wake_all(self) -> None:
        for listeners in self._waiters.values():
            for listener in listeners:
                listener.event.set()

    async def _run(self) -> None:
        while True:
            client = redis.asyncio.Redis.from_url(
                self.url, socket_connect_timeout=REDIS_TIMEOUT_S, decode_responses=True
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(self.pattern)
                self._subscriptions += 1
                self._seen.clear()
                self.subscribed.set()
                if self._failing:
                    self._failing = False
                    logger.warning("Redis answers again: long polls get wake-ups")
                    self._wake_all()
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        self._wake(message["channel"])
            except (RedisError, OSError) as exc:
                self.subscribed.clear()
                self._wake_all()  # each re-checks, then on its own every FALLBACK_RECHECK_S
                if not self._failing:
                    self._failing = True
                    logger.warning(
                        "no wake-ups while Redis does not answer (long polls re-check every "
                        "%.0f s): %s",
                        FALLBACK_RECHECK_S,
                        exc,
                    )
            finally:
                try:
                    await pubsub.aclose()
                    await client.aclose()
                except (RedisError, OSError):
                    pass
            await asyncio.sleep(FALLBACK_RECHECK_S)

    async def close(self) -> None:
        """Stop the subscriber and re-check tasks and close the connection."""
        for task in (self._task, self._tick):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._tick = None
        self.subscribed.clear()


def wakeup_hub() -> WakeupHub:
    """The running event loop's ``WakeupHub`` (created on first use, on ``REDIS_URL``).

    Must be called from a coroutine.
    """
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = WakeupHub(settings.REDIS_URL)
    return hub

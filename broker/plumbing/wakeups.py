"""Wake-ups for long polls: a Redis pub/sub notification when something a poller waits for
becomes visible, so a waiting receive or check-requests poll re-reads the database at once
instead of every 100 ms.

Channels (one per thing waited for; the payload is ignored):

- ``topic_channel(topic)``: a message became visible on ``topic`` (a normal send, the commit of
  a half message, a copy to ``%DLQ%{group}``/``%RETRY%{group}``). One channel per topic, not
  per topic and consumer group: every consumer group of the topic has a new message, and a
  channel per subscription would need the broker to know the groups at commit time.
- ``check_requests_channel(producer_group)``: a back-check was queued for a polling group.
- ``timers_channel()``: a delay or timer message was scheduled (the timer re-reads its next
  due time).

More: docs/design.md, "Module notes", broker/plumbing/wakeups.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import redis
import redis.asyncio
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

logger = logging.getLogger("halfmoon.wakeups")

FALLBACK_RECHECK_S = 1.0  # longest a waiter sleeps without a wake-up while Redis is away

PUBLISH_RETRY_S = 1.0  # after a failed publish, commits skip publishing this long

REDIS_TIMEOUT_S = 0.5  # connect and socket timeout of the publisher: bounds a commit's delay

_PREFIX = "halfmoon:wakeup:"


def _channel_prefix() -> str:
    # Pub/sub channels are shared by all Redis databases: name the database in the channel so
    # two brokers on one Redis (or two test runs) do not wake each other's waiters.
    db = redis.connection.parse_url(settings.REDIS_URL).get("db", 0)
    return f"{_PREFIX}{db}:"


def topic_channel(topic: str) -> str:
    """The wake-up channel of ``topic``: ``halfmoon:wakeup:<db>:topic:<topic>``."""
    return f"{_channel_prefix()}topic:{topic}"


def check_requests_channel(producer_group: str) -> str:
    """The wake-up channel of a polling producer group's check requests:
    ``halfmoon:wakeup:<db>:checks:<producer_group>``."""
    return f"{_channel_prefix()}checks:{producer_group}"


def timers_channel() -> str:
    """The wake-up channel of the timer (``broker.services.timers.runner``): a delay or timer
    message was scheduled, perhaps earlier than the one it sleeps until:
    ``halfmoon:wakeup:<db>:timers``."""
    return f"{_channel_prefix()}timers"


class _Pending:
    """The channels one database transaction touched; called once by ``on_commit``."""

    def __init__(self) -> None:
        self.channels: set[str] = set()

    def __call__(self) -> None:
        wakeup_publish(self.channels)


def wakeup_on_commit(channel: str) -> None:
    """Publish a wake-up on ``channel`` when the current database transaction commits; at
    once outside a transaction. Channels of one transaction are published together, once.

    Nothing is published for a rolled-back write (its ``on_commit`` callback is dropped). A
    channel added inside a savepoint that later rolls back is still published: a spurious
    wake-up only costs its waiters one database read.
    """
    conn = transaction.get_connection()
    if not conn.in_atomic_block:
        wakeup_publish([channel])
        return
    pending = getattr(conn, "_halfmoon_wakeups", None)
    # Still registered for this transaction? (Gone once run, or dropped by a rollback.)
    if pending is None or not any(func is pending for _, func, *_ in conn.run_on_commit):
        pending = _Pending()
        conn._halfmoon_wakeups = pending  # type: ignore[attr-defined]
        transaction.on_commit(pending)
    pending.channels.add(channel)


class _Publisher:
    """The process's publishing client (redis-py's pool is thread- and fork-safe)."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None
        self._skip_until = 0.0
        self._failing = False
        self._lock = threading.Lock()

    def publish(self, channels: Iterable[str]) -> bool:
        channels = sorted(set(channels))
        if not channels or time.monotonic() < self._skip_until:
            return False
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = redis.Redis.from_url(
                        settings.REDIS_URL,
                        socket_connect_timeout=REDIS_TIMEOUT_S,
                        socket_timeout=REDIS_TIMEOUT_S,
                    )
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for channel in channels:
                    pipe.publish(channel, b"1")
                pipe.execute()
        except (RedisError, OSError) as exc:
            self._skip_until = time.monotonic() + PUBLISH_RETRY_S
            if not self._failing:
                self._failing = True
                logger.warning(
                    "wake-ups are not published while Redis does not answer (long polls "
                    "re-check every %.0f s): %s",
                    FALLBACK_RECHECK_S,
                    exc,
                )
            return False
        if self._failing:
            self._failing = False
            logger.warning("Redis answers again: wake-ups are published")
        return True


_publisher = _Publisher()


def wakeup_publish(channels: Iterable[str]) -> bool:
    """Publish one wake-up on each of ``channels`` now, in one round trip.

    Returns True when Redis took them, False when skipped or failed (never raises: logged once
    while Redis is away, then skipped for ``PUBLISH_RETRY_S`` so commits are not delayed by a
    connect timeout each).
    """
    return _publisher.publish(channels)

"""Counters shared by every process, in Redis: how many of something happened in one window."""

from __future__ import annotations

import logging

import redis
from django.conf import settings

logger = logging.getLogger("halfmoon.checks")

_redis_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    """This process's Redis client for the counters (``REDIS_URL``, 2 s timeouts)."""
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return _redis_client


def window_count_add(key: str, count: int, *, ttl_s: int) -> int | None:
    """Add ``count`` to the counter ``key`` (kept ``ttl_s`` seconds after its last add) and
    return its total after the add; None when Redis does not answer (logged), so that a caller
    treating the count as a guard can go on without it."""
    try:
        pipe = _redis().pipeline()
        pipe.incrby(key, count)
        pipe.expire(key, ttl_s)
        return int(pipe.execute()[0])
    except redis.RedisError:
        logger.warning("counter %s not counted: Redis did not answer", key, exc_info=True)
        return None

"""Cached reads of the configuration every request needs: access keys, topics, producer groups
and consumer groups. They change rarely and are read on every send and every receive, so each
process keeps them in memory (``_LookupCache``) for ``HALFMOON_LOOKUP_CACHE_MS`` (5 s): a new
check_url, a deleted group or a consumer group's new ``max_delivery_attempts`` takes effect in
other processes within that time, and at once in the process that made the change
(``post_save``/``post_delete`` signals, and ``consumer_group_forget`` after an update, forget
the entry).

Access keys go faster: a revoked (deleted) or changed key is refused or changed in every
process within 1 s. Each change, once committed, writes a fresh random *generation* to Redis
(``ACCESS_KEY_GENERATION_KEY``); every process reads it at most every
``ACCESS_KEY_GENERATION_CHECK_S`` (0.25 s) and keys its cached access keys by it, so a new
generation makes every cached key a miss there. While Redis does not answer, a process keeps
its last generation and says so in the log (``halfmoon.lookups``, once per outage): changes
made elsewhere then reach it only when its cached entry expires (``HALFMOON_LOOKUP_CACHE_MS``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from cachetools import TTLCache
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from broker.conf import conf
from broker.errors import not_found
from broker.models import AccessKey, ConsumerGroup, ProducerGroup, Topic

logger = logging.getLogger("halfmoon.lookups")

_MISSING = "__missing__"

ACCESS_KEY_GENERATION_KEY = "halfmoon:lookups:access-key-generation"
"""Redis key of the access keys' generation: a random hex token, rewritten after every committed
change of an access key (create, rights, secret, delete). Random, not a counter, so a Redis that
lost the key and counted again never repeats a generation a process already holds."""
ACCESS_KEY_GENERATION_CHECK_S = 0.25
"""A process reads the generation at most this often (s): with Redis's round trip, a revoked
key is refused everywhere within 1 s."""
ACCESS_KEY_GENERATION_RETRY_S = 1.0
"""While Redis does not answer, a process tries it again at most this often (s)."""
REDIS_TIMEOUT_S = 0.5
"""Connect and read timeout of the generation's Redis calls (s)."""


class _LookupCache:
    """This process's cached lookups: a ``cachetools.TTLCache`` (at most
    ``LOOKUP_CACHE_MAX_ENTRIES``, each kept ``HALFMOON_LOOKUP_CACHE_MS``) behind a lock, shared
    by the process's threads. The cached rows are shared too, not copies: nothing changes a
    looked-up row in place (a change is saved from a row read anew, and forgets the entry).

    Not Django's local-memory cache: it pickles every value in and out and checks every key
    character by character, which costs more than the lookup saves (figures in
    bench/README.md). A new ``HALFMOON_LOOKUP_CACHE_MS``
    (a test's setting) starts an empty cache; 0 caches nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ttl_s = -1.0
        self._entries: TTLCache[str, Any] = TTLCache(LOOKUP_CACHE_MAX_ENTRIES, 0)

    def _current(self) -> TTLCache[str, Any] | None:
        ttl_s = _timeout_s()
        if ttl_s <= 0:
            return None
        if ttl_s != self._ttl_s:
            self._entries = TTLCache(LOOKUP_CACHE_MAX_ENTRIES, ttl_s, timer=time.monotonic)
            self._ttl_s = ttl_s
        return self._entries

    def get(self, key: str) -> Any:
        """The value cached under ``key``, or None (missing or expired)."""
        with self._lock:
            entries = self._current()
            return None if entries is None else entries.get(key)

    def set(self, key: str, value: Any) -> None:
        """Cache ``value`` under ``key`` for ``HALFMOON_LOOKUP_CACHE_MS``."""
        with self._lock:
            entries = self._current()
            if entries is not None:
                entries[key] = value

    def delete(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget everything (``lookups_forget_all``)."""
        with self._lock:
            self._entries.clear()


LOOKUP_CACHE_MAX_ENTRIES = 10_000
_lookup_cache = _LookupCache()


def lookups_forget_all() -> None:
    """Forget every cached lookup of this process (a test whose database was rolled back)."""
    _lookup_cache.clear()


def _timeout_s() -> float:
    return conf.lookup_cache_ms / 1000


class _AccessKeyGeneration:
    """This process's copy of the access keys' generation in Redis, read at most every
    ``ACCESS_KEY_GENERATION_CHECK_S`` by one request thread at a time (the others go on with
    the copy they have), and ``ACCESS_KEY_GENERATION_RETRY_S`` while Redis is away."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._value = ""
        self._next_check = 0.0  # time.monotonic() of the next read
        self._redis_away = False

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(
                settings.REDIS_URL,
                socket_timeout=REDIS_TIMEOUT_S,
                socket_connect_timeout=REDIS_TIMEOUT_S,
            )
        return self._client

    def current(self) -> str:
        """The generation to key cached access keys by: Redis's, at most
        ``ACCESS_KEY_GENERATION_CHECK_S`` old; the last one read while Redis is away."""
        if time.monotonic() < self._next_check or not self._lock.acquire(blocking=False):
            return self._value
        try:
            if time.monotonic() >= self._next_check:
                self._read()
        finally:
            self._lock.release()
        return self._value

    def _read(self) -> None:
        try:
            raw = self._redis().get(ACCESS_KEY_GENERATION_KEY)
        except redis.RedisError as exc:
            self._next_check = time.monotonic() + ACCESS_KEY_GENERATION_RETRY_S
            if not self._redis_away:
                self._redis_away = True
                logger.warning(
                    "Redis does not answer (%s): access keys revoked or changed in other "
                    "processes reach this one only when its cached key expires "
                    "(HALFMOON_LOOKUP_CACHE_MS=%d) until Redis answers again",
                    exc,
                    conf.lookup_cache_ms,
                )
            return
        self._next_check = time.monotonic() + ACCESS_KEY_GENERATION_CHECK_S
        if self._redis_away:
            self._redis_away = False
            logger.info("Redis answers again: access-key revocations reach this process in 1 s")
        self._value = raw.decode("ascii", "replace") if raw else ""

    def announce(self) -> None:
        """Write a new generation to Redis, so every process drops its cached access keys
        within ``ACCESS_KEY_GENERATION_CHECK_S``. If Redis does not answer, log it: other
        processes then see the change within ``HALFMOON_LOOKUP_CACHE_MS``."""
        try:
            self._redis().set(ACCESS_KEY_GENERATION_KEY, uuid.uuid4().hex)
        except redis.RedisError as exc:
            logger.warning(
                "an access key changed but Redis does not answer (%s): other processes see "
                "the change only when their cached key expires (HALFMOON_LOOKUP_CACHE_MS=%d)",
                exc,
                conf.lookup_cache_ms,
            )


_access_key_generation = _AccessKeyGeneration()
# A forked child (Celery's prefork pool) starts afresh: no lock held by a parent's thread, no
# parent's connection.
os.register_at_fork(after_in_child=lambda: _access_key_generation._reset())


def access_key_generation_refresh() -> None:
    """Read the access keys' generation from Redis now, whatever its age (after a key changed,
    so that this process caches keys under the generation every process will read next)."""
    with _access_key_generation._lock:
        _access_key_generation._read()


def _access_key_cache_key(token_hash: str) -> str:
    return f"accesskey:{_access_key_generation.current()}:{token_hash}"


def access_key_by_hash(token_hash: str) -> AccessKey | None:
    """The access key whose token hashes to ``token_hash`` (SHA-256 hex), or None.

    Cached per process for ``HALFMOON_LOOKUP_CACHE_MS``, under the access keys' generation in
    Redis (see the module's docstring): a key revoked or changed in any process is seen here
    within 1 s, or within the cache time while Redis is away. Redis's absence raises nothing.
    """
    if _timeout_s() <= 0:  # no cache: nothing to invalidate, no Redis round trip
        return AccessKey.objects.filter(token_hash=token_hash).first()
    key = _access_key_cache_key(token_hash)
    found = _lookup_cache.get(key)
    if found is None:
        found = AccessKey.objects.filter(token_hash=token_hash).first() or _MISSING
        if found is not _MISSING:
            _lookup_cache.set(key, found)
    return None if found == _MISSING else found


def access_key_by_name(name: str) -> AccessKey | None:
    """The access key named ``name``, or None: the AccessKey of a RocketMQ client's signature
    (``broker.services.access.secrets``).

    Cached as ``access_key_by_hash`` (under the access keys' generation: a key revoked, changed
    or given a new secret in any process is seen here within 1 s); an unknown name is read
    again next time.
    """
    if _timeout_s() <= 0:
        return AccessKey.objects.filter(name=name).first()
    key = _access_key_name_cache_key(name)
    found = _lookup_cache.get(key)
    if found is None:
        found = AccessKey.objects.filter(name=name).first()
        if found is not None:
            _lookup_cache.set(key, found)
    return found


def _access_key_name_cache_key(name: str) -> str:
    return f"accesskey-name:{_access_key_generation.current()}:{name}"


def _cached(key: str, load: Callable[[], Any]) -> Any:
    """The cached value of ``key``, else ``load()`` (cached for ``HALFMOON_LOOKUP_CACHE_MS``
    unless None: a missing row is read again next time)."""
    found = _lookup_cache.get(key)
    if found is None:
        found = load()
        if found is not None:
            _lookup_cache.set(key, found)
    return found


def topic_by_name(name: str) -> Topic | None:
    """The topic ``name`` (system topics included), or None."""
    return _cached(f"topic:{name}", lambda: Topic.objects.filter(name=name).first())


def producer_group_exists(name: str) -> bool:
    """True if the producer group ``name`` exists."""
    key = f"pgroup:{name}"
    if _lookup_cache.get(key):
        return True
    exists = ProducerGroup.objects.filter(name=name).exists()
    if exists:
        _lookup_cache.set(key, True)
    return exists


def producer_group_require(name: str) -> None:
    """Check that the producer group ``name`` exists (cached as ``producer_group_exists``).

    Raises:
        NotFound: ``producer_group_not_found``.
    """
    if not producer_group_exists(name):
        raise not_found("producer_group", name)


def consumer_group_by_name(name: str) -> ConsumerGroup | None:
    """The consumer group ``name`` (its ``max_delivery_attempts`` as of at most
    ``HALFMOON_LOOKUP_CACHE_MS`` ago), or None."""
    return _cached(f"cgroup:{name}", lambda: ConsumerGroup.objects.filter(name=name).first())


def consumer_group_forget(name: str) -> None:
    """Drop the cached consumer group ``name`` (after a change that sends no ``post_save``,
    such as a queryset ``update``)."""
    _lookup_cache.delete(f"cgroup:{name}")


def topic_forget(name: str) -> None:
    """Drop the cached topic ``name`` (after a queue lookup failed, e.g. it was recreated)."""
    _lookup_cache.delete(f"topic:{name}")


@receiver([post_save, post_delete], sender=AccessKey)
def _access_key_changed(sender: type, instance: AccessKey, **kwargs: Any) -> None:
    token_hash, name = instance.token_hash, instance.name

    def forget() -> None:
        _lookup_cache.delete(_access_key_cache_key(token_hash))
        _lookup_cache.delete(_access_key_name_cache_key(name))

    def committed() -> None:
        # Again after the commit: a request of this process may have read the old row meanwhile.
        forget()
        _access_key_generation.announce()

    forget()
    transaction.on_commit(committed)


@receiver([post_save, post_delete], sender=Topic)
def _topic_changed(sender: type, instance: Topic, **kwargs: Any) -> None:
    topic_forget(instance.name)


@receiver([post_save, post_delete], sender=ProducerGroup)
def _producer_group_changed(sender: type, instance: ProducerGroup, **kwargs: Any) -> None:
    _lookup_cache.delete(f"pgroup:{instance.name}")


@receiver([post_save, post_delete], sender=ConsumerGroup)
def _consumer_group_changed(sender: type, instance: ConsumerGroup, **kwargs: Any) -> None:
    consumer_group_forget(instance.name)

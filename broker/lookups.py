"""Cached reads of the configuration every request needs: access keys, topics and producer
groups. They change rarely and are read on every send, so each process keeps them in Django's
local-memory cache for ``HALFMOON_LOOKUP_CACHE_MS`` (5 s): a revoked key, a new check_url or a
deleted group takes effect in other processes within that time, and at once in the process
that made the change (``post_save``/``post_delete`` signals forget the entry).
"""

from __future__ import annotations

from typing import Any

from django.core.cache import caches
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from broker.conf import conf
from broker.errors import not_found
from broker.models import AccessKey, ProducerGroup, Topic

_MISSING = "__missing__"


def _cache() -> Any:
    return caches["lookups"]


def _timeout_s() -> float:
    return conf.lookup_cache_ms / 1000


def access_key_by_hash(token_hash: str) -> AccessKey | None:
    """The access key whose token hashes to ``token_hash`` (SHA-256 hex), or None."""
    key = f"accesskey:{token_hash}"
    found = _cache().get(key)
    if found is None:
        found = AccessKey.objects.filter(token_hash=token_hash).first() or _MISSING
        if found is not _MISSING:
            _cache().set(key, found, _timeout_s())
    return None if found == _MISSING else found


def topic_by_name(name: str) -> Topic | None:
    """The topic ``name`` (system topics included), or None."""
    key = f"topic:{name}"
    found = _cache().get(key)
    if found is None:
        found = Topic.objects.filter(name=name).first()
        if found is not None:
            _cache().set(key, found, _timeout_s())
    return found


def producer_group_exists(name: str) -> bool:
    """True if the producer group ``name`` exists."""
    key = f"pgroup:{name}"
    if _cache().get(key):
        return True
    exists = ProducerGroup.objects.filter(name=name).exists()
    if exists:
        _cache().set(key, True, _timeout_s())
    return exists


def producer_group_require(name: str) -> None:
    """Check that the producer group ``name`` exists (cached as ``producer_group_exists``).

    Raises:
        NotFound: ``producer_group_not_found``.
    """
    if not producer_group_exists(name):
        raise not_found("producer_group", name)


def topic_forget(name: str) -> None:
    """Drop the cached topic ``name`` (after a queue lookup failed, e.g. it was recreated)."""
    _cache().delete(f"topic:{name}")


@receiver([post_save, post_delete], sender=AccessKey)
def _access_key_changed(sender: type, instance: AccessKey, **kwargs: Any) -> None:
    _cache().delete(f"accesskey:{instance.token_hash}")


@receiver([post_save, post_delete], sender=Topic)
def _topic_changed(sender: type, instance: Topic, **kwargs: Any) -> None:
    topic_forget(instance.name)


@receiver([post_save, post_delete], sender=ProducerGroup)
def _producer_group_changed(sender: type, instance: ProducerGroup, **kwargs: Any) -> None:
    _cache().delete(f"pgroup:{instance.name}")

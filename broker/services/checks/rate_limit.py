"""The per-producer-group check rate, counted across every worker in Redis
(``HALFMOON_CHECK_GROUP_MAX_PER_SECOND``; no RocketMQ counterpart: RocketMQ sends each check
through the producer's own connection)."""

from __future__ import annotations

import logging

import redis
from django.conf import settings

from broker.conf import conf
from broker.models import Transaction
from broker.rules.states import TransactionState
from broker.services.checks.payload import CheckJob

logger = logging.getLogger("halfmoon.checks")

RATE_KEY_TTL_S = 5  # a one-second window's counter outlives its second, then goes
HELD_BACK_MS = 1000  # a held-back check is due again when the next window opens

_redis_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    """This process's Redis client for the counters (``REDIS_URL``, 2 s timeouts)."""
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return _redis_client


def check_rate_limit(jobs: list[CheckJob], *, now: int) -> list[CheckJob]:
    """Keep at most ``HALFMOON_CHECK_GROUP_MAX_PER_SECOND`` checks per producer group per second,
    counted across every worker in Redis (a fixed one-second window, key
    ``halfmoon:check-rate:{group}:{now // 1000}``). The rest are held back, not sent and not
    counted, and become due again a second after ``now`` (ms).

    Returns the jobs to send, in their order. If Redis does not answer, every job is kept: the
    limit is a guard, not a dependency.
    """
    limit = conf.check_group_max_per_second
    by_group: dict[str, list[CheckJob]] = {}
    for job in jobs:
        by_group.setdefault(job.producer_group, []).append(job)
    kept: list[CheckJob] = []
    held: list[str] = []
    window = now // 1000
    for group, group_jobs in by_group.items():
        key = f"halfmoon:check-rate:{group}:{window}"
        try:
            pipe = _redis().pipeline()
            pipe.incrby(key, len(group_jobs))
            pipe.expire(key, RATE_KEY_TTL_S)
            used = int(pipe.execute()[0])
        except redis.RedisError:
            logger.warning(
                "check rate of %s not counted: Redis did not answer", group, exc_info=True
            )
            kept.extend(group_jobs)
            continue
        allowed = max(0, limit - (used - len(group_jobs)))
        kept.extend(group_jobs[:allowed])
        held.extend(job.transaction_id for job in group_jobs[allowed:])
    if held:
        Transaction.objects.filter(pk__in=held, state=TransactionState.PREPARED).update(
            next_check_timestamp=now + HELD_BACK_MS
        )
        logger.info("held back %d checks over the per-group rate", len(held))
    return kept

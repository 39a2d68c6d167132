"""The per-producer-group check rate, counted across every worker in Redis
(``HALFMOON_CHECK_GROUP_MAX_PER_SECOND``; no RocketMQ counterpart: RocketMQ sends each check
through the producer's own connection)."""

from __future__ import annotations

import logging

from broker.conf import conf
from broker.models import Transaction
from broker.plumbing.rate_counter import window_count_add
from broker.rules.states import TransactionState
from broker.services.checks.payload import CheckJob

logger = logging.getLogger("halfmoon.checks")

RATE_KEY_TTL_S = 5  # a one-second window's counter outlives its second, then goes
HELD_BACK_MS = 1000  # a held-back check is due again when the next window opens


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
        used = window_count_add(key, len(group_jobs), ttl_s=RATE_KEY_TTL_S)
        if used is None:  # Redis did not answer: the limit is a guard, not a dependency
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

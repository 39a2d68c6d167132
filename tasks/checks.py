"""Back-check tasks: thin wrappers that take a lease and call ``broker.services.checks``."""

from __future__ import annotations

import logging
import os
import secrets
import socket

from celery import shared_task
from django.conf import settings

from broker.conf import setting
from broker.services.checks import check_round
from broker.services.leases import lease_acquire, lease_release

logger = logging.getLogger("halfmoon.tasks")


def _lease_owner() -> str:
    """A lease owner naming this one task run: host, pid and a random part. Computed per call:
    Celery's prefork children are forked after this module is imported (a module constant would
    hold the parent's pid for all of them) and a threads pool shares one pid, so two scans of
    one queue in the same worker must not look like the same owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _lease_ttl_ms() -> int:
    """A round holds its queue's lease at most this long: enough for a full batch of checks
    timing out (batch / concurrency waves of the request timeout), at least 30 s."""
    waves = -(-setting("HALFMOON_CHECK_BATCH_SIZE") // setting("HALFMOON_CHECK_CONCURRENCY"))
    return max(30_000, (waves + 1) * setting("HALFMOON_CHECK_REQUEST_TIMEOUT_MS") * 2)


@shared_task(name="tasks.checks.check_dispatch", ignore_result=True)
def check_dispatch() -> None:
    """Beat entry: one ``check_half_queue`` task per half queue."""
    every_s = max(1, settings.HALFMOON_SETTINGS["HALFMOON_CHECK_SCAN_INTERVAL_MS"] // 1000)
    for queue_id in range(setting("HALFMOON_HALF_QUEUE_NUMS")):
        check_half_queue.apply_async((queue_id,), expires=every_s * 2)


@shared_task(name="tasks.checks.check_half_queue", ignore_result=True)
def check_half_queue(queue_id: int) -> dict[str, int] | None:
    """Run check rounds on one half queue while it has due transactions, holding its lease.

    Returns the summed counts, or None if another worker holds the queue's lease (a scan
    still running is never started twice).
    """
    name = f"check:{queue_id}"
    owner = _lease_owner()
    if not lease_acquire(name=name, owner=owner, ttl_ms=_lease_ttl_ms()):
        return None
    totals: dict[str, int] = {}
    try:
        while True:
            counts = check_round(half_queue_id=queue_id)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            if counts["due"] < setting("HALFMOON_CHECK_BATCH_SIZE"):
                break
            if not lease_acquire(name=name, owner=owner, ttl_ms=_lease_ttl_ms()):
                break  # the lease expired and another worker took the queue over
    finally:
        lease_release(name=name, owner=owner)
    if totals.get("due"):
        logger.info("half queue %d: %s", queue_id, totals)
    return totals

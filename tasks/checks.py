"""Back-check tasks: thin wrappers that take a lease and call ``broker.services.checks``."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time

from celery import shared_task
from django.conf import settings

from broker.conf import setting
from broker.services.checks import check_round, checkpoint_advance
from broker.services.leases import lease_acquire, lease_release
from broker.services.ops import op_flush

logger = logging.getLogger("halfmoon.tasks")


def _lease_owner() -> str:
    """A lease owner naming this one task run: host, pid and a random part. Computed per call:
    Celery's prefork children are forked after this module is imported (a module constant would
    hold the parent's pid for all of them) and a threads pool shares one pid, so two scans of
    one queue in the same worker must not look like the same owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _lease_ttl_ms() -> int:
    """How long a queue's lease lasts unless renewed: half the check interval (at most 60 s, at
    least one scan interval), so that when a worker dies mid-scan, its lease has expired and
    another worker's scan has taken the queue over within one check interval. A round that
    outlives its lease is still safe: the claim step locks rows and pushes their next check,
    so an overlapping round never sends the same check again."""
    interval = setting("HALFMOON_TRANSACTION_CHECK_INTERVAL_MS")
    return max(setting("HALFMOON_CHECK_SCAN_INTERVAL_MS"), min(interval // 2, 60_000))


@shared_task(name="tasks.checks.check_dispatch", ignore_result=True)
def check_dispatch() -> None:
    """Beat entry: one ``check_half_queue`` task per half queue."""
    every_s = max(1, settings.HALFMOON_SETTINGS["HALFMOON_CHECK_SCAN_INTERVAL_MS"] // 1000)
    for queue_id in range(setting("HALFMOON_HALF_QUEUE_NUMS")):
        check_half_queue.apply_async((queue_id,), expires=every_s * 2)


@shared_task(name="tasks.checks.check_half_queue", ignore_result=True)
def check_half_queue(queue_id: int) -> dict[str, int] | None:
    """Scan one half queue, holding its lease: check rounds while it has due transactions and
    the scan's time budget (``HALFMOON_CHECK_MAX_PROCESS_TIME_MS``, RocketMQ
    MAX_PROCESS_TIME_LIMIT) lasts, then flush its Op journal and advance its checkpoints.

    Returns the summed counts, or None if another worker holds the queue's lease (a scan
    still running is never started twice).
    """
    name = f"check:{queue_id}"
    owner = _lease_owner()
    if not lease_acquire(name=name, owner=owner, ttl_ms=_lease_ttl_ms()):
        return None
    deadline = time.monotonic() + setting("HALFMOON_CHECK_MAX_PROCESS_TIME_MS") / 1000
    totals: dict[str, int] = {}
    try:
        while True:
            counts = check_round(half_queue_id=queue_id)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            if counts["due"] < setting("HALFMOON_CHECK_BATCH_SIZE") or time.monotonic() > deadline:
                break
            if not lease_acquire(name=name, owner=owner, ttl_ms=_lease_ttl_ms()):
                break  # the lease expired and another worker took the queue over
        # Flush this queue's Op journal here too: beat's flush tasks can wait behind long check
        # rounds in a busy pool, and the checkpoint only passes offsets the Op log names.
        op_flush(half_queue_id=queue_id)
        checkpoint_advance(half_queue_id=queue_id)
    finally:
        lease_release(name=name, owner=owner)
    if totals.get("due"):
        logger.info("half queue %d: %s", queue_id, totals)
    return totals

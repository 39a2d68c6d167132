"""Back-check tasks: thin wrappers that take a lease and call ``broker.services.checks``."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from celery import shared_task
from django.db import connection

from broker.conf import conf
from broker.models import now_ms
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
    another worker's scan has taken the queue over within one check interval. A live scan
    keeps its lease with a heartbeat (``_LeaseKeeper``) however long its rounds take, so no
    other scan claims its transactions before it has counted the checks it sent."""
    interval = conf.transaction_check_interval_ms
    return max(conf.check_scan_interval_ms, min(interval // 2, 60_000))


@shared_task(name="tasks.checks.check_dispatch", ignore_result=True)
def check_dispatch() -> None:
    """Beat entry: one ``check_half_queue`` task per half queue."""
    every_s = conf.check_scan_interval_s
    for queue_id in range(conf.half_queue_nums):
        check_half_queue.apply_async((queue_id,), expires=every_s * 2)


class _LeaseKeeper(threading.Thread):
    """Renews a lease every third of its TTL while a scan runs, so the lease never expires under
    a live scan, however long a round's checks take: no other worker can claim the queue's
    transactions before this scan has counted the checks it sent. If the worker dies, renewals
    stop and the lease expires within its TTL (half a check interval). ``lost`` turns True if a
    renewal finds the lease taken (it had expired before a renewal came)."""

    def __init__(self, *, name: str, owner: str, ttl_ms: int) -> None:
        super().__init__(name=f"lease-{name}", daemon=True)
        self.lease, self.owner, self.ttl_ms = name, owner, ttl_ms
        self.lost = False
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.ttl_ms / 3000):
                if not lease_acquire(name=self.lease, owner=self.owner, ttl_ms=self.ttl_ms):
                    self.lost = True
                    return
        finally:
            connection.close()  # this thread's own database connection

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


@shared_task(name="tasks.checks.check_half_queue", ignore_result=True)
def check_half_queue(queue_id: int) -> dict[str, int] | None:
    """Scan one half queue, holding its lease (kept alive by a heartbeat): check rounds while
    they find transactions due when the scan started and the scan's time budget
    (``HALFMOON_CHECK_MAX_PROCESS_TIME_MS``, RocketMQ MAX_PROCESS_TIME_LIMIT) lasts, then flush
    its Op journal and advance its checkpoints.

    Returns the summed counts, or None if another worker holds the queue's lease (a scan
    still running is never started twice).
    """
    name = f"check:{queue_id}"
    owner = _lease_owner()
    ttl_ms = _lease_ttl_ms()
    if not lease_acquire(name=name, owner=owner, ttl_ms=ttl_ms):
        return None
    keeper = _LeaseKeeper(name=name, owner=owner, ttl_ms=ttl_ms)
    keeper.start()
    deadline = time.monotonic() + conf.check_max_process_time_ms / 1000
    started = now_ms()
    totals: dict[str, int] = {}
    try:
        # A round claims at most one batch, and at most HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT of a
        # group, so keep going while rounds find transactions that were due when the scan
        # started; what falls due meanwhile waits for the next scan.
        while not keeper.lost:
            counts = check_round(half_queue_id=queue_id, due_by=started)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            if counts["due"] == 0 or time.monotonic() > deadline:
                break
            if not lease_acquire(name=name, owner=owner, ttl_ms=ttl_ms):
                break  # the lease expired and another worker took the queue over
        # Flush this queue's Op journal here too: beat's flush tasks can wait behind long check
        # rounds in a busy pool, and the checkpoint only passes offsets the Op log names.
        op_flush(half_queue_id=queue_id)
        checkpoint_advance(half_queue_id=queue_id)
    finally:
        keeper.stop()
        lease_release(name=name, owner=owner)
    if totals.get("due"):
        logger.info("half queue %d: %s", queue_id, totals)
    return totals

"""Leases on periodic work, arbitrated by the database (no lock service needed): a row per
lease in ``broker_scanlease``, taken with a conditional UPDATE, kept alive by a heartbeat
thread (``LeaseKeeper``) while the work runs, and expiring when its holder dies."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q

from broker.models import ScanLease
from broker.rules.clock import now_ms

logger = logging.getLogger(__name__)


def lease_acquire(*, name: str, owner: str, ttl_ms: int) -> bool:
    """Take or renew the lease ``name`` for ``owner`` for ``ttl_ms`` milliseconds.

    Returns True if ``owner`` now holds it: it was free, expired (its holder died), or already
    ``owner``'s. A conditional UPDATE decides, so two workers never both win.
    """
    now = now_ms()
    won = ScanLease.objects.filter(Q(expires_timestamp__lt=now) | Q(owner=owner), name=name).update(
        owner=owner, expires_timestamp=now + ttl_ms
    )
    if won:
        return True
    try:
        with transaction.atomic():
            ScanLease.objects.create(name=name, owner=owner, expires_timestamp=now + ttl_ms)
        return True
    except IntegrityError:
        return False


def lease_release(*, name: str, owner: str) -> None:
    """Give the lease back if ``owner`` still holds it."""
    ScanLease.objects.filter(name=name, owner=owner).update(owner="", expires_timestamp=0)


def lease_owner() -> str:
    """A lease owner naming one run of periodic work: host, pid and a random part.

    Computed per call: Celery's prefork children are forked after import (a module constant
    would hold the parent's pid for all of them) and a threads pool shares one pid, so two
    scans of one queue in the same worker must not look like the same owner.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class LeaseKeeper(threading.Thread):
    """Renews a lease every third of its TTL while the work runs, so the lease never expires
    under live work however long its steps take. If the process dies, renewals stop and the
    lease expires within its TTL. ``lost`` turns True if a renewal finds the lease taken (it
    had expired before a renewal came), or if renewals failed with a database error (a
    failover, a dropped connection; each is retried on a new connection at the next tick)
    until a whole TTL passed since the last one that succeeded: another worker may hold the
    lease by then. The keeper then stops renewing, and the work must stop without writing
    its result.

    Use ``start()`` after ``lease_acquire`` and ``stop()`` before ``lease_release``. The thread
    has its own database connection, closed when it ends.
    """

    def __init__(self, *, name: str, owner: str, ttl_ms: int) -> None:
        super().__init__(name=f"lease-{name}", daemon=True)
        self.lease, self.owner, self.ttl_ms = name, owner, ttl_ms
        self.lost = False
        self._stop_event = threading.Event()

    def run(self) -> None:
        renewed = time.monotonic()
        try:
            while not self._stop_event.wait(self.ttl_ms / 3000):
                try:
                    held = lease_acquire(name=self.lease, owner=self.owner, ttl_ms=self.ttl_ms)
                except DatabaseError as exc:
                    logger.warning("lease %s: renewal failed (%s); retrying", self.lease, exc)
                    connection.close()  # the next tick opens a new one
                    if (time.monotonic() - renewed) * 1000 >= self.ttl_ms:
                        self.lost = True
                        return
                    continue
                if not held:
                    self.lost = True
                    return
                renewed = time.monotonic()
        finally:
            connection.close()  # this thread's own database connection

    def stop(self) -> None:
        """Stop renewing and wait for the thread to end."""
        self._stop_event.set()
        self.join()

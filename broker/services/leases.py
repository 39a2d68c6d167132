"""Leases on periodic work, arbitrated by the database (no lock service needed)."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Q

from broker.models import ScanLease, now_ms


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

"""The lease heartbeat (``broker.plumbing.leases.LeaseKeeper``): a renewal that fails with a
database error is retried, and the lease counts as lost only once a whole TTL has passed
without a renewal, when another worker may hold it. Real PostgreSQL, committed rows: the
keeper renews from its own thread and connection."""

from __future__ import annotations

import time

import pytest
from django.db import OperationalError

from broker.models import ScanLease
from broker.plumbing import leases
from broker.plumbing.leases import LeaseKeeper, lease_acquire

pytestmark = pytest.mark.django_db(transaction=True)

TTL_MS = 300  # renewed every 100 ms


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def failing_renewals(monkeypatch, failures: int | None) -> list[int]:
    """Make the keeper's renewals raise OperationalError: the first ``failures`` of them, or
    all when None. Returns the list the attempts are counted in."""
    real = leases.lease_acquire
    attempts: list[int] = []

    def renew(**kwargs) -> bool:
        attempts.append(1)
        if failures is None or len(attempts) <= failures:
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    monkeypatch.setattr(leases, "lease_acquire", renew)
    return attempts


def test_one_failed_renewal_is_retried_and_the_lease_kept(monkeypatch):
    assert lease_acquire(name="work", owner="me", ttl_ms=TTL_MS)
    attempts = failing_renewals(monkeypatch, failures=1)
    keeper = LeaseKeeper(name="work", owner="me", ttl_ms=TTL_MS)
    keeper.start()
    try:
        assert wait_for(lambda: len(attempts) >= 4)
        assert not keeper.lost
        lease = ScanLease.objects.get(name="work")
        assert lease.owner == "me" and lease.expires_timestamp > int(time.time() * 1000)
    finally:
        keeper.stop()


def test_renewals_failing_for_a_whole_ttl_lose_the_lease(monkeypatch):
    assert lease_acquire(name="work", owner="me", ttl_ms=TTL_MS)
    attempts = failing_renewals(monkeypatch, failures=None)
    keeper = LeaseKeeper(name="work", owner="me", ttl_ms=TTL_MS)
    keeper.start()
    try:
        assert wait_for(lambda: keeper.lost)
        assert len(attempts) >= 2  # it retried before giving up
        assert not keeper.is_alive() or wait_for(lambda: not keeper.is_alive())
    finally:
        keeper.stop()


def test_a_lease_taken_by_another_worker_is_lost_at_the_next_renewal():
    assert lease_acquire(name="work", owner="me", ttl_ms=TTL_MS)
    keeper = LeaseKeeper(name="work", owner="me", ttl_ms=TTL_MS)
    keeper.start()
    try:
        # It expired (say, the process was paused) and another worker took it.
        ScanLease.objects.filter(name="work").update(owner="other", expires_timestamp=2**62)
        assert wait_for(lambda: keeper.lost)
    finally:
        keeper.stop()

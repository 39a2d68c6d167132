"""The scan of a half queue as a service (broker/services/checks/scan.py, ``half_queue_scan``,
RocketMQ ``check()``): its lease and heartbeat, the rounds until nothing due at its start is
left, the MAX_PROCESS_TIME_LIMIT budget, the Op flush and checkpoints at its end, and beat's
fan-out. Clocks are moved (``now_ms``, ``monotonic``), never waited for."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection

from broker.models import Resolution, ScanLease, Transaction
from broker.plumbing import leases
from broker.rules.clock import now_ms
from broker.services.checks import claim, half_queue_scan, outcomes
from broker.services.checks import scan as scan_module
from broker.services.topology.writes import producer_group_create
from tasks.celery import app as celery_app
from tasks.checks import check_dispatch, check_half_queue
from tests.services.checks.helpers import (
    checkpoints,
    prepare_many,
    refreshed,
    run_in_threads,
    url_group,
)
from tests.support import (
    CheckServer,
    prepare,
)


def test_a_scan_checks_every_due_transaction_of_a_group_beyond_its_cap(one_queue, check_server):
    """The cap bounds a round, not the scan: a scan runs rounds until no due transaction is
    left (docs/design.md, "Back-checks"), so a group with 40 due transactions and a cap of 16
    is checked in full by one scan, in rounds of at most 16."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 200
    url_group("G", check_server.url, check_server)
    txs = prepare_many("G", 40)

    totals = half_queue_scan(half_queue_id=0)

    assert totals is not None
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in txs), (
        f"one scan checked {len(check_server.received())} of 40 due transactions: {totals}"
    )
    assert totals["due"] == 40 and totals["sent"] == 40
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


@pytest.mark.django_db(transaction=True)
def test_a_scan_slower_than_its_lease_and_the_interval_keeps_its_queue_and_never_repeats_a_count(
    one_queue, moved_clock
):
    """A round's send and apply can outlast the check interval (slow producers, a busy worker)
    and its lease's TTL (half an interval). The scan keeps renewing its lease while it runs, so
    no other scan of the queue starts, and no transaction is claimed again before the first
    round has counted its check: the producer never receives the same ``check_times`` twice
    (api-v1: it "counts this check too")."""
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 2000  # lease TTL: 1000 ms
    release = threading.Event()

    def held(check: dict) -> tuple[int, dict]:
        release.wait(30)  # answered only once the second scan has tried
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=held) as server:
        url_group("G", server.url, server)
        txs = prepare_many("G", 3)
        first: dict = {}

        def run_first() -> None:
            try:
                first.update(totals=half_queue_scan(half_queue_id=0))
            finally:
                connection.close()

        scan = threading.Thread(target=run_first)
        scan.start()
        try:
            assert len(server.wait_for(3)) == 3  # the first scan waits for its answers
            # Its answers take longer than the lease's TTL and than the check interval: without
            # the heartbeat the lease would have expired and the transactions would be due.
            moved_clock.advance(3000)
            _wait_until(
                lambda: (
                    ScanLease.objects.get(name="check:0").expires_timestamp > moved_clock.now_ms()
                )
            )  # the heartbeat renewed the lease on the moved clock
            second = half_queue_scan(half_queue_id=0)
        finally:
            release.set()
            scan.join(30)
            connection.close()

    assert second is None, f"a second scan ran while the first held the queue: {second}"
    assert first["totals"]["sent"] == 3
    sent = [(r.body["transaction_id"], r.body["check_times"]) for r in server.received()]
    assert sorted(sent) == sorted((tx.transaction_id, 1) for tx in txs)
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


def test_a_scan_flushes_the_op_journal_and_advances_the_checkpoints(one_queue, check_server):
    url_group("G", check_server.url, check_server)
    check_server.answer = lambda check: (200, {"state": "COMMIT_MESSAGE"})
    prepare_many("G", 3)
    totals = half_queue_scan(half_queue_id=0)
    assert totals is not None and totals["committed"] == 3
    assert not Resolution.objects.filter(op_commit_log_offset__isnull=True).exists()
    assert checkpoints() == (3, 1)


def test_a_scan_stops_when_its_time_budget_is_spent(one_queue, check_server, monkeypatch):
    """HALFMOON_CHECK_MAX_PROCESS_TIME_MS (RocketMQ MAX_PROCESS_TIME_LIMIT): a queue with more
    due transactions than fit the budget is left for the next scan, which continues with the
    ones not yet checked."""
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 2
    one_queue["HALFMOON_CHECK_MAX_PROCESS_TIME_MS"] = 1000
    clock = MovedMonotonic()
    monkeypatch.setattr(scan_module, "monotonic", clock)

    def slow(check):
        clock.advance(0.2)  # every round of two checks takes 0.4 s on the scan's clock
        return 200, {"state": "UNKNOW"}

    check_server.answer = slow
    url_group("G", check_server.url, check_server)
    txs = prepare_many("G", 20)  # ten rounds: 4 s, four times the budget

    totals = half_queue_scan(half_queue_id=0)

    assert totals is not None
    assert 2 <= totals["due"] < 20, totals
    assert totals["due"] == 6  # rounds end at 0.4, 0.8 and 1.2 s: the third one spent it
    checked = Counter(check_server.received_ids())
    assert len(checked) == totals["due"] and set(checked.values()) == {1}
    assert ScanLease.objects.get(name="check:0").owner == ""  # released for the next scan
    unchecked = Transaction.objects.filter(check_times=0)
    assert unchecked.count() == 20 - totals["due"]

    # The next scan goes on with the rest, never re-checking the first ones this interval.
    half_queue_scan(half_queue_id=0)
    checked = Counter(check_server.received_ids())
    assert len(checked) > totals["due"]
    assert set(checked.values()) == {1}
    assert {tx.transaction_id for tx in txs} >= set(checked)


def test_the_scan_lease_lasts_half_the_check_interval(one_queue, monkeypatch):
    """``broker.rules.checks.scan_lease_ttl_ms`` of the settings: half the check interval, at
    least one scan interval, at most 60 s; the heartbeat renews it with the same TTL."""
    ttls: list[int] = []
    acquire = scan_module.lease_acquire

    def recording(*, name: str, owner: str, ttl_ms: int) -> bool:
        ttls.append(ttl_ms)
        return acquire(name=name, owner=owner, ttl_ms=ttl_ms)

    monkeypatch.setattr(scan_module, "lease_acquire", recording)
    one_queue["HALFMOON_CHECK_SCAN_INTERVAL_MS"] = 1000
    for interval, ttl in ((30_000, 15_000), (1000, 1000), (600_000, 60_000)):
        one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = interval
        ttls.clear()
        assert half_queue_scan(half_queue_id=0) is not None
        assert ttls == [ttl], interval


@pytest.mark.django_db(transaction=True)
def test_two_scans_of_one_queue_in_parallel_send_each_check_once(one_queue):
    """Two scans whose leases overlap (the first outlived its lease) still never send one
    check twice: the claim locks the rows and leases them one interval ahead."""
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 5
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 5

    def slow(check):
        time.sleep(0.05)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=slow) as server:
        url_group("G", server.url, server)
        prepare_many("G", 30)

        def scans():
            for _ in range(3):
                ScanLease.objects.filter(name="check:0").update(expires_timestamp=0)
                half_queue_scan(half_queue_id=0)

        run_in_threads(scans, 3)
        ScanLease.objects.filter(name="check:0").update(owner="", expires_timestamp=0)
        # Whatever the scans left because a round found its rows locked:
        half_queue_scan(half_queue_id=0)
        ids = server.received_ids()
    assert len(ids) == len(set(ids)) == 30
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


def test_check_task_honours_the_lease(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    tx = prepare()
    name = f"check:{tx.half_queue_id}"
    ScanLease.objects.create(name=name, owner="other-host:1", expires_timestamp=now_ms() + 60_000)

    assert check_half_queue(tx.half_queue_id) is None  # the Celery task is the service
    assert check_server.received() == []
    assert refreshed(tx).check_times == 0
    assert ScanLease.objects.get(name=name).owner == "other-host:1"

    # The other worker died: its lease expires and is taken over.
    ScanLease.objects.filter(name=name).update(expires_timestamp=now_ms() - 1)
    totals = half_queue_scan(half_queue_id=tx.half_queue_id)
    assert totals is not None
    assert (totals["due"], totals["sent"], totals["delivered"]) == (1, 1, 1)
    assert check_server.received_ids() == [tx.transaction_id]
    lease = ScanLease.objects.get(name=name)
    assert (lease.owner, lease.expires_timestamp) == ("", 0)  # released after the run


@pytest.mark.django_db(transaction=True)
def test_two_check_tasks_of_one_process_on_one_queue_never_run_together(topic, broker_settings):
    """Celery runs tasks in forked children (same parent) or in threads of one process: a
    second scan of a queue must not start while the first holds its lease."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    first_arrived = threading.Event()
    release = threading.Event()

    def held(check):
        first_arrived.set()
        release.wait(10)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=held) as server:
        producer_group_create(name="G", check_url=server.url)
        prepare()
        results: list = []

        def run():
            try:
                results.append(half_queue_scan(half_queue_id=0))
            finally:
                connection.close()

        first = threading.Thread(target=run)
        first.start()
        assert first_arrived.wait(10)
        prepare()  # due now, so a second scan would have work to do
        second = threading.Thread(target=run)
        second.start()
        second.join(10)
        release.set()
        first.join(10)
        assert not second.is_alive() and not first.is_alive()
    assert results[0] is None, results  # the second scan found the lease taken
    assert results[1] is not None and results[1]["sent"] == 1


@pytest.mark.django_db(transaction=True)
def test_check_task_stops_when_its_lease_was_taken_over(topic, broker_settings):
    """A round outlived the lease and another worker took the queue: the first one stops at
    the end of its round instead of scanning on beside the new holder."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_CHECK_BATCH_SIZE"] = 1

    def steal_the_lease(check):
        try:
            ScanLease.objects.filter(name="check:0").update(
                owner="new-holder:1", expires_timestamp=now_ms() + 60_000
            )
        finally:
            connection.close()
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=steal_the_lease) as server:
        producer_group_create(name="G", check_url=server.url)
        for i in range(3):
            prepare(body=f"m{i}")
        totals = half_queue_scan(half_queue_id=0)
        assert totals is not None and totals["sent"] == 1
        assert len(server.received()) == 1
    assert (
        ScanLease.objects.get(name="check:0").owner == "new-holder:1"
    )  # not released by the loser
    assert sorted(Transaction.objects.values_list("check_times", flat=True)) == [0, 0, 1]


def test_beat_dispatch_queues_one_scan_per_half_queue_expiring_after_two_scan_intervals(
    broker_settings, monkeypatch
):
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 3
    broker_settings["HALFMOON_CHECK_SCAN_INTERVAL_MS"] = 2000
    sent: list[tuple[str, list, dict]] = []

    class App:
        def send_task(self, name: str, args: list, **options: object) -> None:
            sent.append((name, args, options))

    monkeypatch.setattr(scan_module, "current_app", App())

    assert check_dispatch() == 3  # the beat entry is the service
    assert sent == [("tasks.checks.check_half_queue", [q], {"expires": 4}) for q in range(3)]
    assert scan_module.HALF_QUEUE_SCAN_TASK in celery_app.tasks  # a task of that name exists
    entry = celery_app.conf.beat_schedule["halfmoon-check-dispatch"]
    assert entry["task"] == "tasks.checks.check_dispatch"
    assert entry["task"] in celery_app.tasks


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` until it holds (it is an event another thread brings about)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


class MovedClock:
    """``now_ms`` of the lease and check services, ``offset_ms`` ahead of the real clock."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return now_ms() + self.offset_ms

    def advance(self, ms: int) -> None:
        self.offset_ms += ms


class MovedMonotonic:
    """A ``time.monotonic`` that only moves when told (thread-safe)."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@pytest.fixture
def moved_clock(monkeypatch) -> MovedClock:
    """Every clock read of the scan, its lease and its rounds, movable by the test."""
    clock = MovedClock()
    for module in (leases, scan_module, claim, outcomes):
        monkeypatch.setattr(module, "now_ms", clock.now_ms)
    return clock

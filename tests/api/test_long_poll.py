"""Long polls woken on commit (``broker.plumbing.wakeups``, ``broker.plumbing.polling``): what
publishes a wake-up and what does not, a waiting receive or check-requests poll woken by a commit
in another thread, the ``wait_ms`` upper bound, and the fallback re-check while Redis is away.

The issue: "a commit is visible to a long-polling consumer quickly (wake the waiting receivers on
commit) ... no receive waits past its wait_ms". These tests run the WSGI path (the test client:
``poll_until`` with a ``SyncListener``); the served path (``halfmoon.serving``: the wait in the
event loop on a ``WakeupHub``) is tested in ``tests/halfmoon/test_serving.py`` and end to end in
``tests/e2e/test_long_poll_asgi.py``. No clock is read for an assertion: ``ListenerWaits``
records each wait of a long poll (its timeout, whether a wake-up ended it), so a test starts its
commit once the poll is in its wait and tells a wake-up from a timed re-check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction

from broker.models import Transaction
from broker.plumbing import wakeup_listeners, wakeups
from broker.plumbing.polling import poll_until
from broker.plumbing.wakeup_listeners import SyncListener
from broker.plumbing.wakeups import (
    FALLBACK_RECHECK_S,
    _Publisher,
    check_requests_channel,
    topic_channel,
    wakeup_publish,
)
from broker.services import checks
from broker.services.commitlog.storage import message_visible_on_commit
from broker.services.topology.writes import topic_create
from tests.api_helpers import end, post, send_half, send_message

pytestmark = pytest.mark.django_db(transaction=True)  # commits must really happen

IN_WAIT_TIMEOUT_S = 30  # how long a poll may take to reach its wait on a loaded machine


class Wakeups:
    """A redis-py subscriber to every wake-up channel of the test's Redis database."""

    def __init__(self) -> None:
        self.client = redis.Redis.from_url(settings.REDIS_URL)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(topic_channel("*").split("topic:")[0] + "*")
        while self.pubsub.get_message(timeout=0.5) is not None:  # the psubscribe confirmation
            pass

    def received(self, quiet_s: float = 0.3) -> list[str]:
        """The channels of the wake-ups received until none came for ``quiet_s`` seconds."""
        channels: list[str] = []
        while (message := self.pubsub.get_message(timeout=quiet_s)) is not None:
            if message["type"] == "pmessage":
                channels.append(message["channel"].decode())
        return channels

    def close(self) -> None:
        self.pubsub.close()
        self.client.close()


@pytest.fixture
def wakeups_seen() -> Iterator[Wakeups]:
    seen = Wakeups()
    seen.received(quiet_s=0.05)  # nothing left over
    yield seen
    seen.close()


class ListenerWaits:
    """Every ``SyncListener.wait`` of the test's long polls, the real one run: ``calls`` holds
    (timeout_s asked, True if a wake-up ended it) of each; ``in_wait`` is set as a wait begins
    (the poll's read found nothing, it is subscribed: a wake-up from then on is not missed)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[float, bool]] = []
        self.in_wait = threading.Event()
        real = SyncListener.wait

        def wait(listener: SyncListener, timeout_s: float) -> bool:
            self.in_wait.set()
            woken = real(listener, timeout_s)
            self.calls.append((timeout_s, woken))
            return woken

        monkeypatch.setattr(SyncListener, "wait", wait)

    def reached(self) -> None:
        """Return once a long poll is in its wait."""
        assert self.in_wait.wait(IN_WAIT_TIMEOUT_S), "the long poll never reached its wait"

    def woken(self) -> list[bool]:
        return [woken for _, woken in self.calls]

    def asked_s(self) -> float:
        """The seconds all the waits asked for, together."""
        return sum(timeout_s for timeout_s, _ in self.calls)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> ListenerWaits:
    return ListenerWaits(monkeypatch)


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-check every 120 s instead of 5 s (``HELD_RECHECK_S``): a test that says a
    wake-up ended the wait does not fail because a loaded machine delivered it after 5 s."""
    monkeypatch.setattr(wakeup_listeners, "HELD_RECHECK_S", 120.0)


class Background(threading.Thread):
    """Runs ``call`` in a thread (its own database connection); ``result`` once joined."""

    def __init__(self, call: Any) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test's join
            self.error = exc
        finally:
            connection.close()

    def outcome(self, timeout_s: float) -> Any:
        self.join(timeout_s)
        assert not self.is_alive(), "the long poll did not return"
        if self.error is not None:
            raise self.error
        return self.result


def receive_waiting(client: Any, wait_ms: int, waits: ListenerWaits) -> Background:
    """A receive of consumer group C on TranTest waiting up to ``wait_ms``, started in a thread;
    returns once it is in its wait (its first read found nothing): the tests are about being
    woken, not the first read."""
    poll = Background(
        lambda: post(
            client,
            "/api/v1/consumer-groups/C/receive",
            {"topic": "TranTest", "wait_ms": wait_ms, "max_messages": 1},
        )
    )
    poll.start()
    waits.reached()
    return poll


def check_due(transaction_id: str) -> None:
    """Claim the back-check of ``transaction_id`` as if an hour had passed: producer group G
    polls, so a check request is queued for it."""
    tx = Transaction.objects.get(pk=transaction_id)
    jobs, due = checks.check_claim(
        half_queue_id=tx.half_queue_id, now=int(time.time() * 1000) + 3_600_000
    )
    assert (jobs, due) == ([], 1)


# --- What publishes a wake-up --------------------------------------------------------------------


def test_a_committed_transaction_publishes_one_wakeup_on_its_topic(
    owner, topic, producer_group, wakeups_seen
):
    tx = send_half(owner).json()["transaction_id"]
    assert wakeups_seen.received() == []  # the half message wakes nobody

    assert end(owner, tx, "commit").status_code == 200

    assert wakeups_seen.received() == [topic_channel("TranTest")]


def test_an_end_batch_publishes_one_wakeup_per_topic_not_one_per_commit(
    owner, topic, producer_group, wakeups_seen
):
    txs = [send_half(owner).json()["transaction_id"] for _ in range(5)]
    assert wakeups_seen.received() == []

    ends = [{"transaction_id": tx, "producer_group": "G", "action": "commit"} for tx in txs]
    response = post(owner, "/api/v1/transactions/end-batch", {"ends": ends})
    assert [item["status"] for item in response.json()["results"]] == [200] * 5

    assert wakeups_seen.received() == [topic_channel("TranTest")]


def test_a_rolled_back_transaction_publishes_no_wakeup(owner, topic, producer_group, wakeups_seen):
    tx = send_half(owner).json()["transaction_id"]

    assert end(owner, tx, "rollback").status_code == 200

    assert wakeups_seen.received() == []  # neither the half, the Op message nor the rollback


def test_a_normal_message_publishes_one_wakeup_on_its_topic(owner, topic, wakeups_seen):
    send_message(owner)

    assert wakeups_seen.received() == [topic_channel("TranTest")]


def test_a_database_transaction_publishes_once_after_commit_whatever_it_stored(topic, wakeups_seen):
    with transaction.atomic():
        for _ in range(5):
            message_visible_on_commit("TranTest")
        message_visible_on_commit("Other")
        assert wakeups_seen.received(quiet_s=0.1) == []  # not before the commit

    assert sorted(wakeups_seen.received()) == sorted(
        [topic_channel("TranTest"), topic_channel("Other")]
    )


def test_a_rolled_back_database_transaction_publishes_nothing(owner, topic, wakeups_seen):
    with transaction.atomic():
        message_visible_on_commit("TranTest")
        transaction.set_rollback(True)

    assert wakeups_seen.received() == []


def test_undeliverable_topics_wake_nobody(db, wakeups_seen):
    for system_topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
        message_visible_on_commit(system_topic)

    assert wakeups_seen.received() == []


def test_a_queued_check_request_publishes_a_wakeup_on_its_groups_channel(
    owner, topic, producer_group, wakeups_seen
):
    tx = send_half(owner).json()["transaction_id"]
    wakeups_seen.received()

    check_due(tx)

    assert wakeups_seen.received() == [check_requests_channel("G")]


# --- Waiting receives ----------------------------------------------------------------------------


def test_a_waiting_receive_gets_a_commit_from_another_thread_before_wait_ms(
    owner, consumer, topic, producer_group, consumer_group, waits, no_recheck
):
    tx = send_half(owner, body="woken").json()["transaction_id"]
    poll = receive_waiting(consumer, wait_ms=20_000, waits=waits)

    assert end(owner, tx, "commit").status_code == 200

    response = poll.outcome(timeout_s=25)
    assert response.status_code == 200
    [message] = response.json()["messages"]
    assert message["body"] == "woken"
    assert waits.woken() == [True]  # the commit's wake-up, not a re-check


def test_a_receive_with_nothing_returns_empty_at_wait_ms_and_not_later(
    consumer, topic, consumer_group, waits
):
    started = time.monotonic()

    response = post(
        consumer,
        "/api/v1/consumer-groups/C/receive",
        {"topic": "TranTest", "wait_ms": 1_500},
    )

    assert response.status_code == 200
    assert response.json() == {"messages": []}
    assert time.monotonic() - started >= 1.5  # it waited its wait_ms
    assert waits.woken() == [False]  # one wait, to the deadline: no re-check past it
    assert waits.asked_s() <= 1.5


def test_a_commit_on_another_topic_does_not_end_the_wait(
    owner, consumer, topic, producer_group, consumer_group, waits
):
    topic_create(name="Other", queue_nums=1)
    poll = receive_waiting(consumer, wait_ms=1_500, waits=waits)

    send_message(owner, topic="Other")

    response = poll.outcome(timeout_s=5)
    assert response.json() == {"messages": []}
    assert waits.woken() == [False]  # Other's wake-up did not reach TranTest's waiter
    assert waits.asked_s() <= 1.5


def test_without_redis_a_waiting_receive_still_gets_the_commit_by_the_fallback_recheck(
    owner, consumer, topic, producer_group, consumer_group, settings, monkeypatch, waits
):
    tx = send_half(owner, body="late").json()["transaction_id"]
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(redis.ConnectionError):
        dead.ping()  # nothing listens there
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(wakeups, "_publisher", _Publisher())  # its client: the dead port
    poll = receive_waiting(consumer, wait_ms=10_000, waits=waits)

    assert end(owner, tx, "commit").status_code == 200
    assert wakeup_publish([topic_channel("TranTest")]) is False  # nothing was published

    response = poll.outcome(timeout_s=15)
    [message] = response.json()["messages"]
    assert message["body"] == "late"
    assert waits.calls and all(  # found by a 1 s re-check, not at the 10 s deadline
        timeout_s <= FALLBACK_RECHECK_S and not woken for timeout_s, woken in waits.calls
    )


# --- Waiting check-requests polls ----------------------------------------------------------------


def test_a_waiting_check_requests_poll_is_woken_when_a_check_is_queued(
    owner, producer, topic, producer_group, waits, no_recheck
):
    tx = send_half(owner).json()["transaction_id"]
    poll = Background(
        lambda: producer.get("/api/v1/producer-groups/G/check-requests?wait_ms=20000")
    )
    poll.start()
    waits.reached()

    check_due(tx)

    response = poll.outcome(timeout_s=25)
    assert response.status_code == 200
    assert waits.woken() == [True], response.json()  # the queued check's wake-up
    [request] = response.json()["check_requests"]
    assert request["transaction_id"] == tx


# --- wait_ms counts from the request's arrival ---------------------------------------------------


def test_a_long_poll_counts_wait_ms_from_the_requests_arrival_not_its_first_read(db, waits):
    reads: list[float] = []

    def fetch() -> list[str]:
        reads.append(time.monotonic())
        return []

    arrived = time.monotonic() - 1.0  # it waited 1 s for a thread before its first read

    found = poll_until(fetch, wait_ms=1_500, channel=topic_channel("TranTest"), started=arrived)

    assert found == []
    assert reads, "read at least once"
    assert waits.asked_s() <= 0.5  # what was left of 1.5 s after the 1 s queued, not 1.5 s


def test_a_long_poll_whose_wait_ms_passed_while_queued_reads_once_and_answers(db):
    reads: list[float] = []

    def fetch() -> list[str]:
        reads.append(time.monotonic())
        return []

    found = poll_until(
        fetch, wait_ms=500, channel=topic_channel("TranTest"), started=time.monotonic() - 2.0
    )

    assert (found, len(reads)) == ([], 1)

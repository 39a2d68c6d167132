"""The check service's scan rules at scale, in-process against real PostgreSQL, Redis and HTTP
check servers (issue 3): per-group caps, the per-group rate limit, group backoff, a dead producer
group beside a healthy one, the check journal's answer labels, the scan checkpoints and the
per-queue time budget.

Rounds run at a chosen ``now`` (``tests.support.round_at``) wherever the rule is about time, so
nothing here sleeps to move the clock. The rate limiter's Redis counters go to Redis database 9
(flushed per test), so no other test run shares their one-second windows.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest
import redis
from django.db import connection, transaction

from broker.constants import CHECK_GROUP, HALF_TOPIC, OP_HALF_TOPIC
from broker.models import (
    CheckRequest,
    ConsumeQueue,
    ConsumerOffset,
    Message,
    ProducerGroup,
    Resolution,
    ScanLease,
    Transaction,
    TransactionEvent,
    now_ms,
)
from broker.services import checks
from broker.services.admin import producer_group_create
from broker.services.operator import transaction_operator_resolve
from broker.services.ops import op_flush
from broker.services.transactions import transaction_discard, transaction_end
from tasks.checks import check_half_queue
from tests.support import CheckServer, prepare, round_at


@pytest.fixture(autouse=True)
def _op_journal_flushed_at_once(broker_settings):
    """These tests set up flushed Op journals; RIP-50's batching rule (full messages at once,
    the rest after HALFMOON_OP_BATCH_INTERVAL_MS) has its own tests in test_op_batching.py."""
    broker_settings["HALFMOON_OP_BATCH_INTERVAL_MS"] = 0


RATE_REDIS_URL = "redis://127.0.0.1:6379/9"
SILENT_PORT = 18120  # listens, never accepts: the request is sent, no answer ever comes
REFUSED_PORT = 18121  # bound, never listening: connection refused


@pytest.fixture(autouse=True)
def rate_redis(settings, monkeypatch):
    """The per-group rate counters in a Redis database of this file's own, empty."""
    settings.REDIS_URL = RATE_REDIS_URL
    client = redis.Redis.from_url(RATE_REDIS_URL)
    client.flushdb()
    monkeypatch.setattr(checks, "_redis_client", None)
    yield client
    client.flushdb()


@pytest.fixture
def one_queue(topic, broker_settings):
    """Every transaction on half queue 0, due as soon as it is stored."""
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    return broker_settings


@pytest.fixture
def check_server():
    with CheckServer() as server:
        yield server


@pytest.fixture
def silent_url():
    """A URL whose port completes the TCP handshake (the kernel's accept queue) but never reads
    or answers: every request is sent and then times out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", SILENT_PORT))
    sock.listen(4096)
    try:
        yield f"http://127.0.0.1:{SILENT_PORT}/check"
    finally:
        sock.close()


@pytest.fixture
def refused_url():
    """A URL whose port is held (bound) but not listening: connection refused, every time."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", REFUSED_PORT))
    try:
        yield f"http://127.0.0.1:{REFUSED_PORT}/check"
    finally:
        sock.close()


def _group(name: str, url: str, server: CheckServer | None = None) -> ProducerGroup:
    group = producer_group_create(name=name, check_url=url)
    if server is not None:
        server.secrets[name] = group.check_secret
    return group


def _prepare_many(group: str, count: int) -> list[Transaction]:
    return [prepare(producer_group=group, body=f"{group} {i}") for i in range(count)]


def _by_group(jobs) -> Counter:
    return Counter(job.producer_group for job in jobs)


def _events(kind: str, group: str | None = None):
    events = TransactionEvent.objects.filter(kind=kind)
    if group is not None:
        events = events.filter(
            transaction_id__in=Transaction.objects.filter(producer_group=group).values("pk")
        )
    return events


def _group_row(name: str) -> ProducerGroup:
    return ProducerGroup.objects.get(name=name)


# --- Per-group cap: one group cannot crowd out the others -------------------------------------


def test_a_group_gets_at_most_its_cap_per_round_beside_another_group(one_queue, check_server):
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 200
    _group("BIG", check_server.url, check_server)
    _group("SMALL", check_server.url, check_server)
    big = _prepare_many("BIG", 100)  # due first: born earlier
    small = _prepare_many("SMALL", 5)
    now = now_ms()

    jobs, due = checks.check_claim(half_queue_id=0, now=now)
    assert due == 21
    assert _by_group(jobs) == {"BIG": 16, "SMALL": 5}
    # The group's oldest due transactions, each leased one interval ahead.
    assert {j.transaction_id for j in jobs if j.producer_group == "BIG"} == {
        tx.transaction_id for tx in big[:16]
    }
    interval = one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"]
    claimed = Transaction.objects.filter(pk__in=[j.transaction_id for j in jobs])
    assert set(claimed.values_list("next_check_timestamp", flat=True)) == {now + interval}
    assert set(claimed.values_list("check_times", flat=True)) == {0}  # claimed is not counted

    # The rest of the group waits for the next round, which takes the next 16 (and nothing
    # claimed before: those are one interval ahead).
    jobs2, due2 = checks.check_claim(half_queue_id=0, now=now)
    assert (due2, _by_group(jobs2)) == (16, {"BIG": 16})
    assert {j.transaction_id for j in jobs2} == {tx.transaction_id for tx in big[16:32]}
    assert not {j.transaction_id for j in jobs2} & {tx.transaction_id for tx in small}


def test_the_cap_counts_a_polling_group_too(one_queue, check_server):
    """Groups without check_url get check requests queued, capped the same way."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 3
    producer_group_create(name="POLL", check_url=None)
    _group("HTTP", check_server.url, check_server)
    _prepare_many("POLL", 10)
    _prepare_many("HTTP", 2)

    jobs, due = checks.check_claim(half_queue_id=0, now=now_ms())
    assert due == 5
    assert _by_group(jobs) == {"HTTP": 2}
    assert CheckRequest.objects.filter(producer_group="POLL").count() == 3


def test_a_scan_checks_every_due_transaction_of_a_group_beyond_its_cap(one_queue, check_server):
    """The cap bounds a round, not the scan: a scan runs rounds until no due transaction is
    left (docs/design.md, "Back-checks"), so a group with 40 due transactions and a cap of 16
    is checked in full by one scan, in rounds of at most 16."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 200
    _group("G", check_server.url, check_server)
    txs = _prepare_many("G", 40)

    totals = check_half_queue(0)

    assert totals is not None
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in txs), (
        f"one scan checked {len(check_server.received())} of 40 due transactions: {totals}"
    )
    assert totals["due"] == 40 and totals["sent"] == 40
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


@pytest.mark.django_db(transaction=True)
def test_a_scan_slower_than_its_lease_and_the_interval_keeps_its_queue_and_never_repeats_a_count(
    one_queue,
):
    """A round's send and apply can outlast the check interval (slow producers, a busy worker)
    and its lease's TTL (half an interval). The scan keeps renewing its lease while it runs, so
    no other scan of the queue starts, and no transaction is claimed again before the first
    round has counted its check: the producer never receives the same ``check_times`` twice
    (api-v1: it "counts this check too")."""
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 2000  # lease TTL: 1000 ms

    def slow(check: dict) -> tuple[int, dict]:
        time.sleep(3.0)  # longer than the lease TTL and than the check interval
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=slow) as server:
        _group("G", server.url, server)
        txs = _prepare_many("G", 3)
        first: dict = {}
        scan = threading.Thread(target=lambda: first.update(totals=check_half_queue(0)))
        scan.start()
        time.sleep(2.5)  # the first scan is still waiting for its answers
        second = check_half_queue(0)
        scan.join()
        connection.close()

    assert second is None, f"a second scan ran while the first held the queue: {second}"
    assert first["totals"]["sent"] == 3
    sent = [(r.body["transaction_id"], r.body["check_times"]) for r in server.received()]
    assert sorted(sent) == sorted((tx.transaction_id, 1) for tx in txs)
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


# --- Per-group rate limit (Redis, across workers) ---------------------------------------------


def test_checks_over_the_group_rate_are_held_back_uncounted_and_due_a_second_later(
    one_queue, check_server, rate_redis
):
    one_queue["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 5
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    interval = one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"]
    _group("G", check_server.url, check_server)
    _group("OTHER", check_server.url, check_server)
    txs = _prepare_many("G", 12)
    others = _prepare_many("OTHER", 3)
    now = now_ms()

    result = round_at(0, now)

    assert result["due"] == 15
    assert _by_group(result["jobs"]) == {"G": 5, "OTHER": 3}  # another group has its own rate
    sent = {j.transaction_id for j in result["jobs"] if j.producer_group == "G"}
    assert sent == {tx.transaction_id for tx in txs[:5]}
    assert len(check_server.received()) == 8
    rows = {tx.pk: tx for tx in Transaction.objects.filter(producer_group="G")}
    held = [pk for pk in rows if pk not in sent]
    for pk in sent:
        assert (rows[pk].check_times, rows[pk].next_check_timestamp) == (1, now + interval)
    for pk in held:  # not sent, not counted, due again one second later
        assert (rows[pk].check_times, rows[pk].next_check_timestamp) == (0, now + 1000)
    assert not _events("check_sent").filter(transaction_id__in=held).exists()
    assert not _events("check_undelivered").exists()
    assert int(rate_redis.get(f"halfmoon:check-rate:G:{now // 1000}")) >= 5

    # Not due before that second has passed; then the next 5 go out, the other 2 wait again.
    assert round_at(0, now + 999)["due"] == 0
    result = round_at(0, now + 1000)
    assert result["due"] == 7
    assert _by_group(result["jobs"]) == {"G": 5}
    assert Counter(
        Transaction.objects.filter(producer_group="G").values_list("check_times", flat=True)
    ) == {1: 10, 0: 2}
    result = round_at(0, now + 2000)
    assert (result["due"], _by_group(result["jobs"])) == (2, {"G": 2})
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}
    # Each transaction was checked exactly once: holding back never sends twice.
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in txs + others)


def test_the_group_rate_is_shared_by_every_half_queue(topic, broker_settings, check_server):
    """Two half queues (two workers' scans) share one group's budget for a second."""
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 2
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 5
    broker_settings["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 30
    _group("G", check_server.url, check_server)
    txs = _prepare_many("G", 30)
    per_queue = Counter(tx.half_queue_id for tx in txs)
    assert per_queue[0] >= 5 and per_queue[1] >= 5, per_queue
    now = (now_ms() // 1000 + 1) * 1000 + 10  # both rounds in one one-second window

    first = round_at(0, now)
    second = round_at(1, now + 1)
    assert len(first["jobs"]) == 5 and second["jobs"] == []
    assert first["due"] + second["due"] == 30
    assert len(check_server.received()) == 5
    assert Transaction.objects.filter(check_times=1).count() == 5
    held = Transaction.objects.filter(check_times=0)
    assert held.count() == 25
    assert set(held.values_list("next_check_timestamp", flat=True)) <= {now + 1000, now + 1001}

    # The next second, the budget is there again.
    assert len(round_at(1, now + 1001)["jobs"]) == 5


def test_checks_go_out_when_redis_does_not_answer(one_queue, check_server, settings, monkeypatch):
    """The rate limit is a guard, not a dependency: without Redis every claimed check is sent."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 1
    monkeypatch.setattr(
        checks,
        "_redis_client",
        redis.Redis(host="127.0.0.1", port=REFUSED_PORT, socket_connect_timeout=0.5),
    )
    with socket.socket() as held:
        held.bind(("127.0.0.1", REFUSED_PORT))
        _group("G", check_server.url, check_server)
        _prepare_many("G", 3)
        result = round_at(0, now_ms())
    assert len(result["jobs"]) == 3
    assert len(check_server.received()) == 3


# --- Group backoff ----------------------------------------------------------------------------


def test_a_group_whose_checks_all_time_out_is_backed_off_and_cleared_by_an_answer(
    one_queue, check_server, silent_url
):
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 5000
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 20_000
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 2
    _group("DEAD", silent_url)
    _group("OK", check_server.url, check_server)
    dead = _prepare_many("DEAD", 6)
    ok = _prepare_many("OK", 1)
    t0 = now_ms()

    result = round_at(0, t0)
    assert _by_group(result["jobs"]) == {"DEAD": 2, "OK": 1}
    assert [o.answer for o in result["outcomes"] if o.job.producer_group == "DEAD"] == [
        "TIMEOUT",
        "TIMEOUT",
    ]
    row = _group_row("DEAD")
    assert (row.check_failures, row.check_backoff_until) == (1, t0 + 5000)
    assert (_group_row("OK").check_failures, _group_row("OK").check_backoff_until) == (0, None)
    assert Transaction.objects.get(pk=ok[0].pk).check_times == 1

    # While backed off, none of the group's due transactions is claimed; other groups' are.
    late = prepare(producer_group="OK", body="late")
    assert late.born_timestamp < t0 + 4999
    result = round_at(0, t0 + 4999)
    assert [j.transaction_id for j in result["jobs"]] == [late.transaction_id]
    assert result["due"] == 1

    # Then one probe round (capped), failing again: the delay doubles, up to the interval.
    backoffs = []
    now = t0 + 5000
    for _ in range(3):
        result = round_at(0, now)
        assert _by_group(result["jobs"])["DEAD"] == 2, result["jobs"]
        row = _group_row("DEAD")
        backoffs.append(row.check_backoff_until - now)
        assert "DEAD" not in _by_group(round_at(0, row.check_backoff_until - 1)["jobs"])
        now = row.check_backoff_until
    assert backoffs == [10_000, 20_000, 20_000]
    assert _group_row("DEAD").check_failures == 4
    # Every probe took the group's two oldest due transactions; timed out after sending, each
    # of those checks counted.
    dead_counts = list(
        Transaction.objects.filter(pk__in=[t.pk for t in dead]).values_list(
            "check_times", flat=True
        )
    )
    assert sum(dead_counts) == 8 and min(dead_counts) == 1, dead_counts
    assert _events("check_sent", "DEAD").count() == 8

    # The producer answers again: one answer clears the backoff.
    ProducerGroup.objects.filter(name="DEAD").update(check_url=check_server.url)
    check_server.secrets["DEAD"] = _group_row("DEAD").check_secret
    result = round_at(0, now)
    assert _by_group(result["jobs"])["DEAD"] == 2
    assert all(o.answer == "UNKNOW" for o in result["outcomes"])
    row = _group_row("DEAD")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


def test_a_group_whose_checks_are_all_undelivered_is_backed_off(
    one_queue, check_server, refused_url
):
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 1000
    _group("DOWN", refused_url)
    down = _prepare_many("DOWN", 3)
    t0 = now_ms()

    result = round_at(0, t0)
    assert [o.delivered for o in result["outcomes"]] == [False] * 3
    row = _group_row("DOWN")
    assert (row.check_failures, row.check_backoff_until) == (1, t0 + 1000)
    assert row.unreachable_since == t0
    assert round_at(0, t0 + 999)["due"] == 0
    assert set(
        Transaction.objects.filter(pk__in=[t.pk for t in down]).values_list(
            "check_times", flat=True
        )
    ) == {0}


def test_one_answer_in_a_round_keeps_the_group_out_of_backoff(one_queue, check_server):
    """Backoff is for groups none of whose checks got an answer: one slow producer of a
    group that otherwise answers does not stop the group's checks."""
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    _group("G", check_server.url, check_server)
    slow, fast = _prepare_many("G", 2)

    def answer(check):
        if check["transaction_id"] == slow.transaction_id:
            time.sleep(1)
        return 200, {"state": "UNKNOW"}

    check_server.answer = answer
    result = round_at(0, now_ms())
    assert sorted(o.answer for o in result["outcomes"]) == ["TIMEOUT", "UNKNOW"]
    row = _group_row("G")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


def test_a_backed_off_group_is_cleared_by_a_later_answer_of_another_queue(
    topic, broker_settings, check_server
):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    _group("G", check_server.url, check_server)
    ProducerGroup.objects.filter(name="G").update(check_failures=3, check_backoff_until=1)
    tx = prepare()
    round_at(tx.half_queue_id, now_ms())
    row = _group_row("G")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


# --- A dead producer group beside a healthy one -----------------------------------------------


def test_a_dead_group_does_not_delay_a_healthy_one(
    one_queue, check_server, silent_url, refused_url
):
    """300 due transactions of DEAD (requests sent, never answered) and 20 of DOWN (connection
    refused) ahead of HEALTHY's few in the same half queue: HEALTHY's transactions are checked
    in the first round in which they are due; DEAD and DOWN are capped per round and backed
    off; DEAD's timed-out checks count as UNKNOW, DOWN's refused ones do not count."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 4
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 5000
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 30_000
    one_queue["HALFMOON_TRANSACTION_CHECK_MAX"] = 1000
    _group("DEAD", silent_url)
    _group("DOWN", refused_url)
    _group("HEALTHY", check_server.url, check_server)
    _prepare_many("DEAD", 300)
    _prepare_many("DOWN", 20)
    healthy = _prepare_many("HEALTHY", 3)
    t0 = now_ms()

    # Round 1: everyone is due; each dead group gets its cap, HEALTHY all of its three.
    result = round_at(0, t0)
    assert _by_group(result["jobs"]) == {"DEAD": 4, "DOWN": 4, "HEALTHY": 3}
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in healthy)
    answers = Counter((o.job.producer_group, o.answer, o.delivered) for o in result["outcomes"])
    assert answers == {
        ("DEAD", "TIMEOUT", True): 4,
        ("DOWN", "", False): 4,
        ("HEALTHY", "UNKNOW", True): 3,
    }
    # Timed out after sending: counted as UNKNOW. Refused: not counted, retried with backoff.
    assert Counter(_events("check_sent", "DEAD").values_list("outcome", flat=True)) == {
        "TIMEOUT": 4
    }
    assert Transaction.objects.filter(producer_group="DEAD", check_times=1).count() == 4
    assert not _events("check_sent", "DOWN").exists()
    assert _events("check_undelivered", "DOWN").count() == 4
    assert not Transaction.objects.filter(producer_group="DOWN", check_times__gt=0).exists()
    for name in ("DEAD", "DOWN"):
        row = _group_row(name)
        assert (row.check_failures, row.check_backoff_until) == (1, t0 + 5000), name
    assert _group_row("DOWN").unreachable_since == t0
    assert _group_row("DEAD").unreachable_since is None  # it did receive the requests

    # New HEALTHY transactions become due while the dead groups are backed off: the next
    # round takes them and nothing of DEAD or DOWN, whose 312 due transactions wait.
    fresh = _prepare_many("HEALTHY", 2)
    t1 = max(tx.born_timestamp for tx in fresh)
    assert t1 < t0 + 5000
    result = round_at(0, t1)
    assert _by_group(result["jobs"]) == {"HEALTHY": 2}
    assert [o.answer for o in result["outcomes"]] == ["UNKNOW", "UNKNOW"]
    assert len(check_server.received()) == 5

    # When the backoff ends, one capped probe each, then a longer backoff.
    result = round_at(0, t0 + 5000)
    assert _by_group(result["jobs"]) == {"DEAD": 4, "DOWN": 4}
    for name in ("DEAD", "DOWN"):
        row = _group_row(name)
        assert (row.check_failures, row.check_backoff_until) == (2, t0 + 15_000), name
    assert round_at(0, t0 + 14_999)["jobs"] == []
    # Over all of this, DEAD saw 8 requests of its 300 due transactions, DOWN 8 attempts.
    assert _events("check_sent", "DEAD").count() == 8
    assert _events("check_undelivered", "DOWN").count() == 8
    assert set(
        Transaction.objects.filter(producer_group="HEALTHY").values_list("check_times", flat=True)
    ) == {1}


# --- The check journal records what the producer answered -------------------------------------


@pytest.mark.parametrize(
    ("answer", "label", "state"),
    [
        pytest.param(
            (200, {"state": "COMMIT_MESSAGE"}), "COMMIT_MESSAGE", "COMMITTED", id="commit"
        ),
        pytest.param(
            (200, {"state": "ROLLBACK_MESSAGE"}), "ROLLBACK_MESSAGE", "ROLLED_BACK", id="rollback"
        ),
        pytest.param((200, {"state": "UNKNOW"}), "UNKNOW", "PREPARED", id="UNKNOW"),
        pytest.param((200, {"state": "UNKNOWN"}), "UNKNOW", "PREPARED", id="UNKNOWN"),
        pytest.param((200, b"garbage, not json"), "INVALID", "PREPARED", id="garbage"),
        pytest.param((200, "COMMIT_MESSAGE"), "INVALID", "PREPARED", id="bare-word"),
        pytest.param((200, {"state": "commit_message"}), "INVALID", "PREPARED", id="lower-case"),
        pytest.param(
            (200, {"state": "COMMIT_MESSAGE "}), "INVALID", "PREPARED", id="trailing-space"
        ),
        pytest.param((200, {"state": ["COMMIT_MESSAGE"]}), "INVALID", "PREPARED", id="state-list"),
        pytest.param((200, {"status": "COMMIT_MESSAGE"}), "INVALID", "PREPARED", id="no-state"),
        pytest.param((201, {"state": "COMMIT_MESSAGE"}), "INVALID", "PREPARED", id="http-201"),
        pytest.param((204, b""), "INVALID", "PREPARED", id="http-204"),
        pytest.param((500, {"state": "ROLLBACK_MESSAGE"}), "INVALID", "PREPARED", id="http-500"),
        pytest.param((202, b""), "ACCEPTED", "PREPARED", id="accepted-202"),
        pytest.param((202, {"state": "COMMIT_MESSAGE"}), "ACCEPTED", "PREPARED", id="202-body"),
    ],
)
def test_the_answer_is_recorded_strictly_in_the_check_journal(
    one_queue, check_server, answer, label, state
):
    check_server.answer = lambda check: answer
    _group("G", check_server.url, check_server)
    tx = prepare()
    round_at(0, now_ms())

    [event] = _events("check_sent")
    assert (event.transaction_id, event.outcome, event.check_times) == (tx.pk, label, 1)
    assert event.actor == "http"
    tx.refresh_from_db()
    assert (tx.state, tx.check_times) == (state, 1)
    assert not _events("check_undelivered").exists()


def test_a_timeout_after_sending_is_journalled_as_timeout_and_counted(one_queue, silent_url):
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    _group("G", silent_url)
    tx = prepare()
    round_at(0, now_ms())

    [event] = _events("check_sent")
    assert (event.outcome, event.check_times) == ("TIMEOUT", 1)
    assert "Timeout" in event.detail["error"]
    tx.refresh_from_db()
    assert (tx.state, tx.check_times) == ("PREPARED", 1)


def test_an_undelivered_check_is_journalled_as_undelivered_and_not_counted(one_queue, refused_url):
    _group("G", refused_url)
    tx = prepare()
    round_at(0, now_ms())

    assert not _events("check_sent").exists()
    [event] = _events("check_undelivered")
    assert (event.outcome, event.check_times) == ("UNDELIVERED", 0)
    assert event.detail["retry_in_ms"] == one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"]
    tx.refresh_from_db()
    assert (tx.state, tx.check_times, tx.undelivered_checks) == ("PREPARED", 0, 1)


# --- Scan checkpoints of CID_RMQ_SYS_TRANS ----------------------------------------------------


def _checkpoints() -> tuple[int, int]:
    rows = dict(
        ConsumerOffset.objects.filter(consumer_group=CHECK_GROUP, queue_id=0).values_list(
            "topic", "offset"
        )
    )
    return rows[HALF_TOPIC], rows[OP_HALF_TOPIC]


def _advance() -> tuple[int, int]:
    result = checks.checkpoint_advance(half_queue_id=0)
    assert result == _checkpoints()
    return result


def _end(tx: Transaction, action: str = "commit") -> None:
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action=action)


def _op_bodies() -> list[str]:
    return [
        bytes(body).decode()
        for body in Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=0)
        .order_by("queue_offset")
        .values_list("body", flat=True)
    ]


def test_checkpoints_move_over_the_done_prefix_only(one_queue, producer_group):
    txs = _prepare_many("G", 6)
    assert [tx.half_queue_offset for tx in txs] == list(range(6))
    assert _advance() == (0, 0)

    # Resolved but not yet in the Op log: not done.
    _end(txs[0])
    assert _advance() == (0, 0)
    assert op_flush(half_queue_id=0, force=True) == 1
    assert _advance() == (1, 1)

    # Offsets 2 and 3 are done, 1 is still PREPARED: the half checkpoint waits at 1, and the Op
    # message naming 2 and 3 is not passed either.
    _end(txs[2], "rollback")
    _end(txs[3])
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies() == ["0,", "2,3,"]
    assert _advance() == (1, 1)

    # 1 resolved, unflushed: still waiting; flushed: both move over everything done.
    _end(txs[1])
    assert _advance() == (1, 1)
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies() == ["0,", "2,3,", "1,"]
    assert _advance() == (4, 3)

    # A discarded transaction is done (no Op message names it).
    with transaction.atomic():
        transaction_discard(
            Transaction.objects.select_for_update().get(pk=txs[4].pk), reason="check_max"
        )
    assert _advance() == (5, 3)

    # An operator commits the discarded one later: its resolution names offset 4, behind the
    # half checkpoint, which does not move back; its Op message is passed once written.
    transaction_operator_resolve(
        transaction_id=txs[4].transaction_id, action="commit", reason="test", actor="operator:t"
    )
    assert _advance() == (5, 3)
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies()[-1] == "4,"
    assert _advance() == (5, 4)

    # The last one: the half checkpoint reaches the end of the half queue.
    _end(txs[5], "rollback")
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (6, 5)
    half_max = ConsumeQueue.objects.get(topic=HALF_TOPIC, queue_id=0).max_offset
    assert half_max == 6


def test_the_op_checkpoint_stops_at_an_op_message_naming_an_offset_not_yet_passed(
    one_queue, producer_group
):
    txs = _prepare_many("G", 5)
    _end(txs[1])
    _end(txs[3])
    op_flush(half_queue_id=0, force=True)  # Op 0 names 1 and 3
    _end(txs[0])
    op_flush(half_queue_id=0, force=True)  # Op 1 names 0
    assert _op_bodies() == ["1,3,", "0,"]

    # Half checkpoint 2 (offset 2 PREPARED): Op 0 names 3, so neither Op message is passed
    # although Op 1's offset lies below the checkpoint.
    assert _advance() == (2, 0)
    _end(txs[2])
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (4, 3)


def test_checkpoints_never_move_backwards(one_queue, producer_group):
    txs = _prepare_many("G", 3)
    _advance()
    ConsumerOffset.objects.filter(consumer_group=CHECK_GROUP, topic=HALF_TOPIC, queue_id=0).update(
        offset=2
    )
    ConsumerOffset.objects.filter(
        consumer_group=CHECK_GROUP, topic=OP_HALF_TOPIC, queue_id=0
    ).update(offset=7)
    assert _advance() == (2, 7)  # offset 0 is PREPARED, and there is no Op message at all
    for tx in txs:
        _end(tx)
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (3, 7)


def test_the_op_checkpoint_passes_more_than_one_read_batch(one_queue, producer_group):
    count = checks.OP_READ_BATCH * 2 + 5
    txs = _prepare_many("G", count)
    for tx in txs:
        _end(tx)
        op_flush(half_queue_id=0, force=True)  # one Op message each
    assert len(_op_bodies()) == count
    assert _advance() == (count, count)


def test_a_scan_flushes_the_op_journal_and_advances_the_checkpoints(one_queue, check_server):
    _group("G", check_server.url, check_server)
    check_server.answer = lambda check: (200, {"state": "COMMIT_MESSAGE"})
    _prepare_many("G", 3)
    totals = check_half_queue(0)
    assert totals is not None and totals["committed"] == 3
    assert not Resolution.objects.filter(op_commit_log_offset__isnull=True).exists()
    assert _checkpoints() == (3, 1)


# --- The per-queue time budget ----------------------------------------------------------------


def test_a_scan_stops_when_its_time_budget_is_spent(one_queue, check_server):
    """HALFMOON_CHECK_MAX_PROCESS_TIME_MS (RocketMQ MAX_PROCESS_TIME_LIMIT): a queue with more
    due transactions than fit the budget is left for the next scan, which continues with the
    ones not yet checked."""
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 2
    one_queue["HALFMOON_CHECK_MAX_PROCESS_TIME_MS"] = 1000

    def slow(check):
        time.sleep(0.4)  # every round of two parallel checks takes at least 0.4 s
        return 200, {"state": "UNKNOW"}

    check_server.answer = slow
    _group("G", check_server.url, check_server)
    txs = _prepare_many("G", 20)  # ten rounds: at least 4 s, four times the budget

    totals = check_half_queue(0)

    assert totals is not None
    assert 2 <= totals["due"] < 20, totals
    checked = Counter(check_server.received_ids())
    assert len(checked) == totals["due"] and set(checked.values()) == {1}
    assert ScanLease.objects.get(name="check:0").owner == ""  # released for the next scan
    unchecked = Transaction.objects.filter(check_times=0)
    assert unchecked.count() == 20 - totals["due"]

    # The next scan goes on with the rest, never re-checking the first ones this interval.
    check_half_queue(0)
    checked = Counter(check_server.received_ids())
    assert len(checked) > totals["due"]
    assert set(checked.values()) == {1}
    assert {tx.transaction_id for tx in txs} >= set(checked)


# --- Leases of the scan -----------------------------------------------------------------------


def test_lease_ttl_is_half_the_check_interval(broker_settings):
    from tasks.checks import _lease_ttl_ms

    broker_settings["HALFMOON_CHECK_SCAN_INTERVAL_MS"] = 1000
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 30_000
    assert _lease_ttl_ms() == 15_000
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 1000
    assert _lease_ttl_ms() == 1000  # at least one scan interval
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 600_000
    assert _lease_ttl_ms() == 60_000


@pytest.mark.django_db(transaction=True)
def test_two_scans_of_one_queue_in_parallel_send_each_check_once(one_queue):
    """Two scans whose leases overlap (the first outlived its lease) still never send one
    check twice: the claim locks the rows and leases them one interval ahead."""
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 5
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 5
    from django.db import connection

    def slow(check):
        time.sleep(0.05)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=slow) as server:
        _group("G", server.url, server)
        _prepare_many("G", 30)
        errors: list[BaseException] = []

        def scan():
            try:
                for _ in range(3):
                    ScanLease.objects.filter(name="check:0").update(expires_timestamp=0)
                    check_half_queue(0)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=scan) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        ScanLease.objects.filter(name="check:0").update(owner="", expires_timestamp=0)
        check_half_queue(0)  # whatever the scans left because a round found its rows locked
        ids = server.received_ids()
    assert len(ids) == len(set(ids)) == 30
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}

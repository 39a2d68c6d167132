"""Step 1 of a round, ``check_claim`` (broker/services/checks/claim.py): when a half message is
due (transaction timeout, check immunity, one check per interval), needDiscard and needSkip, the
per-group cap, and ``SKIP LOCKED`` between concurrent rounds. Time is moved by passing ``now``
to the round, never by sleeping."""

from __future__ import annotations

import time

import pytest

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    PROPERTY_DISCARD_REASON,
    PROPERTY_TRANSACTION_CHECK_TIMES,
)
from broker.errors import TransactionAlreadyResolved
from broker.models import CheckRequest, Message, Resolution, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.services import checks
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from tests.services.checks.helpers import (
    INTERVAL,
    by_group,
    delivered_copies,
    prepare_many,
    refreshed,
    run_in_threads,
    url_group,
)
from tests.support import (
    CheckServer,
    due_at,
    prepare,
    round_at,
    round_for,
)


def test_no_check_before_the_transaction_timeout(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare()
    born = tx.born_timestamp

    assert round_for(tx, born)["due"] == 0
    assert round_for(tx, born + 5999)["due"] == 0
    assert check_server.received() == []
    assert refreshed(tx).check_times == 0

    result = round_for(tx, born + 6000)
    assert result["due"] == 1
    assert check_server.received_ids() == [tx.transaction_id]
    assert check_server.received()[0].body["check_times"] == 1
    assert refreshed(tx).check_times == 1


def test_check_immunity_delays_the_first_check(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare(check_immunity_seconds=60)
    born = tx.born_timestamp

    round_for(tx, born + 6000)
    round_for(tx, born + 59_999)
    assert check_server.received() == []
    assert refreshed(tx).check_times == 0  # the immunity window consumes no check

    round_for(tx, born + 60_000)
    assert check_server.received_ids() == [tx.transaction_id]
    assert check_server.received()[0].body["check_times"] == 1


def test_immunity_below_the_timeout_is_raised_to_it(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare(check_immunity_seconds=1)
    born = tx.born_timestamp

    round_for(tx, born + 1000)
    round_for(tx, born + 5999)
    assert check_server.received() == []

    round_for(tx, born + 6000)
    assert check_server.received_ids() == [tx.transaction_id]


def test_at_most_one_check_per_interval(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = INTERVAL
    tx = prepare()
    due = due_at(tx)

    for now in (due, due + 1, due + 1000, due + INTERVAL - 1):
        round_for(tx, now)
    assert check_server.received_ids() == [tx.transaction_id]
    assert refreshed(tx).check_times == 1

    round_for(tx, due + INTERVAL)
    round_for(tx, due + INTERVAL + 5)
    assert check_server.received_ids() == [tx.transaction_id] * 2
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2]
    assert refreshed(tx).check_times == 2
    sent = TransactionEvent.objects.filter(
        transaction_id=tx.pk, kind=TransactionEvent.Kind.CHECK_SENT
    )
    assert [e.check_times for e in sent] == [1, 2]


def test_check_max_then_discarded(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    tx = prepare(tags="T", keys="K")
    due = due_at(tx)
    for k in range(3):
        round_for(tx, due + k * INTERVAL)
    tx = refreshed(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 3)

    result = round_for(tx, due + 3 * INTERVAL)
    assert result["due"] == 1 and result["jobs"] == []

    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by, tx.discard_reason) == ("DISCARDED", "discard", "check_max")
    assert tx.check_times == 3
    assert tx.resolved_timestamp is not None
    assert len(check_server.received()) == 3
    assert delivered_copies(tx) == []
    assert not Resolution.objects.filter(transaction=tx).exists()
    [copy] = Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.transaction_id)
    assert bytes(copy.body) == b"hello"
    assert (copy.tags, copy.keys) == ("T", "K")
    assert copy.properties[PROPERTY_DISCARD_REASON] == "check_max"
    assert copy.properties[PROPERTY_TRANSACTION_CHECK_TIMES] == "3"
    assert TransactionEvent.objects.filter(transaction_id=tx.pk, kind="discarded").count() == 1

    # Never checked or delivered afterwards; a producer commit is refused.
    for k in range(4, 8):
        round_for(tx, due + k * INTERVAL)
    assert len(check_server.received()) == 3
    with pytest.raises(TransactionAlreadyResolved):
        transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")
    assert delivered_copies(tx) == []
    assert Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.transaction_id).count() == 1


def test_older_than_file_reserved_hours_is_discarded_whatever_its_count(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_FILE_RESERVED_HOURS"] = 1
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    old = prepare(body="old")
    young = prepare(body="young")
    now = due_at(old) + 1000
    Transaction.objects.filter(pk=old.pk).update(born_timestamp=old.born_timestamp - 3_600_001)

    round_at(old.half_queue_id, now)

    old, young = refreshed(old), refreshed(young)
    assert (old.state, old.resolved_by, old.discard_reason) == (
        "DISCARDED",
        "discard",
        "file_reserved_time",
    )
    assert old.check_times == 0
    assert check_server.received_ids() == [young.transaction_id]
    assert young.state == "PREPARED"
    [copy] = Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=old.transaction_id)
    assert copy.properties[PROPERTY_DISCARD_REASON] == "file_reserved_time"
    assert delivered_copies(old) == []


def test_a_group_gets_at_most_its_cap_per_round_beside_another_group(one_queue, check_server):
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    one_queue["HALFMOON_CHECK_BATCH_SIZE"] = 200
    url_group("BIG", check_server.url, check_server)
    url_group("SMALL", check_server.url, check_server)
    big = prepare_many("BIG", 100)  # due first: born earlier
    small = prepare_many("SMALL", 5)
    now = now_ms()

    jobs, due = checks.check_claim(half_queue_id=0, now=now)
    assert due == 21
    assert by_group(jobs) == {"BIG": 16, "SMALL": 5}
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
    assert (due2, by_group(jobs2)) == (16, {"BIG": 16})
    assert {j.transaction_id for j in jobs2} == {tx.transaction_id for tx in big[16:32]}
    assert not {j.transaction_id for j in jobs2} & {tx.transaction_id for tx in small}


def test_the_cap_counts_a_polling_group_too(one_queue, check_server):
    """Groups without check_url get check requests queued, capped the same way."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 3
    producer_group_create(name="POLL", check_url=None)
    url_group("HTTP", check_server.url, check_server)
    prepare_many("POLL", 10)
    prepare_many("HTTP", 2)

    jobs, due = checks.check_claim(half_queue_id=0, now=now_ms())
    assert due == 5
    assert by_group(jobs) == {"HTTP": 2}
    assert CheckRequest.objects.filter(producer_group="POLL").count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_rounds_never_send_the_same_check_twice(topic, broker_settings):
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_CHECK_BATCH_SIZE"] = 7

    def slow_unknow(check):
        time.sleep(0.05)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=slow_unknow) as server:
        group = producer_group_create(name="G", check_url=server.url)
        server.secrets["G"] = group.check_secret
        txs = [prepare(body=f"m{i}") for i in range(40)]
        assert {tx.half_queue_id for tx in txs} == {0}

        def rounds():
            for _ in range(4):
                checks.check_round(half_queue_id=0)

        run_in_threads(rounds, 4)
        # Whatever the threads left (skipped as locked, or held back by the group's in-flight
        # or rate limits while the others' rounds ran): one round takes at most a batch.
        for _ in range(100):
            if not Transaction.objects.filter(check_times=0).exists():
                break
            checks.check_round(half_queue_id=0)
            time.sleep(0.05)

        ids = server.received_ids()
        assert sorted(ids) == sorted(tx.transaction_id for tx in txs)  # each exactly once
        assert all(r.signature_valid for r in server.received())
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}

"""The per-group check rate across workers (broker/services/checks/rate_limit.py,
``HALFMOON_CHECK_GROUP_MAX_PER_SECOND``, counted in Redis)."""

from __future__ import annotations

import socket
from collections import Counter

import redis

from broker.models import Transaction
from broker.plumbing import rate_counter
from broker.rules.clock import now_ms
from tests.services.checks.helpers import (
    by_group,
    journal,
    prepare_many,
    url_group,
)
from tests.support import (
    round_at,
)


def test_checks_over_the_group_rate_are_held_back_uncounted_and_due_a_second_later(
    one_queue, check_server, rate_redis
):
    one_queue["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 5
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 16
    interval = one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"]
    url_group("G", check_server.url, check_server)
    url_group("OTHER", check_server.url, check_server)
    txs = prepare_many("G", 12)
    others = prepare_many("OTHER", 3)
    now = now_ms()

    result = round_at(0, now)

    assert result["due"] == 15
    assert by_group(result["jobs"]) == {"G": 5, "OTHER": 3}  # another group has its own rate
    sent = {j.transaction_id for j in result["jobs"] if j.producer_group == "G"}
    assert sent == {tx.transaction_id for tx in txs[:5]}
    assert len(check_server.received()) == 8
    rows = {tx.pk: tx for tx in Transaction.objects.filter(producer_group="G")}
    held = [pk for pk in rows if pk not in sent]
    for pk in sent:
        assert (rows[pk].check_times, rows[pk].next_check_timestamp) == (1, now + interval)
    for pk in held:  # not sent, not counted, due again one second later
        assert (rows[pk].check_times, rows[pk].next_check_timestamp) == (0, now + 1000)
    assert not journal("check_sent").filter(transaction_id__in=held).exists()
    assert not journal("check_undelivered").exists()
    assert int(rate_redis.get(f"halfmoon:check-rate:G:{now // 1000}")) >= 5

    # Not due before that second has passed; then the next 5 go out, the other 2 wait again.
    assert round_at(0, now + 999)["due"] == 0
    result = round_at(0, now + 1000)
    assert result["due"] == 7
    assert by_group(result["jobs"]) == {"G": 5}
    assert Counter(
        Transaction.objects.filter(producer_group="G").values_list("check_times", flat=True)
    ) == {1: 10, 0: 2}
    result = round_at(0, now + 2000)
    assert (result["due"], by_group(result["jobs"])) == (2, {"G": 2})
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}
    # Each transaction was checked exactly once: holding back never sends twice.
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in txs + others)


def test_the_group_rate_is_shared_by_every_half_queue(topic, broker_settings, check_server):
    """Two half queues (two workers' scans) share one group's budget for a second."""
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 2
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 5
    broker_settings["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 30
    url_group("G", check_server.url, check_server)
    txs = prepare_many("G", 30)
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
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
        refused_port = held.getsockname()[1]
        monkeypatch.setattr(
            rate_counter,
            "_redis_client",
            redis.Redis(host="127.0.0.1", port=refused_port, socket_connect_timeout=0.5),
        )
        url_group("G", check_server.url, check_server)
        prepare_many("G", 3)
        result = round_at(0, now_ms())
    assert len(result["jobs"]) == 3
    assert len(check_server.received()) == 3

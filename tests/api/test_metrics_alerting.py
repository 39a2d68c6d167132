"""/metrics' alerting families: per producer group and consumer group, labelled by
names only, read from a broker driven through the API."""

from __future__ import annotations

from broker.models import Delivery, DeliveryEvent, Transaction
from broker.services.topology.writes import consumer_group_create
from tests.api.test_ops import samples
from tests.api_helpers import end, post, receive, send_half, send_message
from tests.fifo_state import block_heads, fifo_group, nack, send_group
from tests.fifo_state import receive as fifo_receive
from tests.support import answer_state, check_server_running, due_at, round_for

G = (("producer_group", "G"),)


def test_pending_oldest_and_most_checked_per_producer_group(
    anonymous, owner, producer, topic, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 5
    with check_server_running(answer=answer_state("UNKNOW")) as endpoint:
        post(owner, "/api/v1/producer-groups", {"name": "G", "check_url": endpoint.url})
        found = samples(anonymous)
        assert found[("halfmoon_pending_transactions", G)] == 0
        assert ("halfmoon_pending_oldest_timestamp_seconds", G) not in found
        assert ("halfmoon_pending_max_check_times", G) not in found
        assert found[("halfmoon_producer_group_reachable", G)] == 1
        assert ("halfmoon_producer_group_last_answer_timestamp_seconds", G) not in found
        assert found[("halfmoon_transaction_check_max", ())] == 5

        ids = [send_half(producer).json()["transaction_id"] for _ in range(3)]
        txs = Transaction.objects.filter(pk__in=ids).order_by("born_timestamp")
        oldest = txs[0]
        at = max(due_at(tx) for tx in txs)
        for tx in txs:
            round_for(tx, at)  # one UNKNOW check each
        end(producer, ids[2], "commit")

    found = samples(anonymous)
    assert found[("halfmoon_pending_transactions", G)] == 2
    assert found[("halfmoon_pending_oldest_timestamp_seconds", G)] == oldest.born_timestamp / 1000
    assert found[("halfmoon_pending_max_check_times", G)] == 1
    assert found[("halfmoon_producer_group_checks_total", (("outcome", "UNKNOW"), *G))] == 3
    assert found[("halfmoon_producer_group_checks_total", (("outcome", "TIMEOUT"), *G))] == 0
    assert found[("halfmoon_producer_group_discarded_total", (*G, ("reason", "check_max")))] == 0
    assert found[("halfmoon_producer_group_last_answer_timestamp_seconds", G)] == at / 1000
    assert found[("halfmoon_checks_total", (("outcome", "UNKNOW"),))] == 3


def test_consumer_group_lag_and_dead_letters(anonymous, owner, producer, consumer, topic):
    post(owner, "/api/v1/producer-groups", {"name": "G", "check_url": None})
    post(owner, "/api/v1/consumer-groups", {"name": "C", "max_delivery_attempts": 1})
    for n in range(5):
        send_message(producer, body=f"m{n}")
    assert len(receive(consumer, max_messages=2).json()["messages"]) == 2  # never acked

    found = samples(anonymous)
    lag = ("halfmoon_consumer_group_lag", (("consumer_group", "C"), ("topic", "TranTest")))
    dlq = ("halfmoon_consumer_group_dlq_messages", (("consumer_group", "C"),))
    assert found[lag] == 3  # 5 stored, 2 taken
    assert found[dlq] == 0

    Delivery.objects.update(invisible_until_timestamp=0)
    taken = receive(consumer, max_messages=10).json()["messages"]
    assert len(taken) == 3  # the 2 past 1 attempt went to %DLQ%C, the 3 others are taken

    found = samples(anonymous)
    assert found[dlq] == 2
    assert found[lag] == 0


def test_alerting_labels_are_names_never_ids(anonymous, owner, producer, topic):
    post(owner, "/api/v1/producer-groups", {"name": "G", "check_url": None})
    transaction_id = send_half(producer).json()["transaction_id"]

    for (name, labels), _ in samples(anonymous).items():
        if name.startswith("halfmoon_"):
            assert {k for k, _ in labels} <= {
                "producer_group",
                "consumer_group",
                "topic",
                "outcome",
                "reason",
                "kind",
            }, name
            assert transaction_id not in {v for _, v in labels}


def test_fifo_blocked_message_groups_per_fifo_consumer_group(anonymous, db):
    fifo_group("F")
    fifo_group("Idle", topic="Other")
    consumer_group_create(name="Plain")
    send_group("order-1", 1)
    send_group("order-2", 1)
    send_group("order-1", 1)  # behind order-1's head
    got = block_heads("F", n=2)  # order-1 and order-2's heads, both at attempt 2
    nack("Plain", fifo_receive("Plain", n=3))  # failed too, but Plain is not FIFO
    DeliveryEvent.objects.filter(
        msg_id=got[1].message.msg_id, kind="delivered", delivery_attempt=1
    ).update(timestamp=1_700_000_000_000)

    found = samples(anonymous)
    f, idle = (("consumer_group", "F"),), (("consumer_group", "Idle"),)
    assert found[("halfmoon_fifo_blocked_message_groups", f)] == 2
    assert found[("halfmoon_fifo_blocked_message_groups", idle)] == 0  # FIFO, none blocked
    assert found[("halfmoon_fifo_blocked_oldest_timestamp_seconds", f)] == 1_700_000_000
    assert ("halfmoon_fifo_blocked_oldest_timestamp_seconds", idle) not in found
    # A group that is not FIFO has no such series, whatever it holds.
    plain = (("consumer_group", "Plain"),)
    assert ("halfmoon_fifo_blocked_message_groups", plain) not in found

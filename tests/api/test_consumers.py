"""api-v1 Consumers (RocketMQ 5 SimpleConsumer): receive and ack, their bounds and shapes."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from broker.models import Delivery, Transaction
from broker.services.transactions.resolution import transaction_discard
from tests.api_helpers import ack, assert_error, end, post, receive, send_half, send_message

RECEIVED_FIELDS = {
    "msg_id",
    "topic",
    "message_group",
    "queue_id",
    "queue_offset",
    "tags",
    "keys",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "delivery_attempt",
    "receipt_handle",
}


# --- Receive -------------------------------------------------------------------------------------


def test_a_consumer_receives_a_message_with_its_receipt_handle(
    owner, consumer, topic, consumer_group
):
    before = int(time.time() * 1000)
    sent = send_message(owner, tags="TagA", keys="k1", body="hello", properties={"p": "v"}).json()

    response = receive(consumer)

    assert response.status_code == 200
    assert set(response.json()) == {"messages"}
    [message] = response.json()["messages"]
    assert set(message) == RECEIVED_FIELDS | {"body"}
    assert message["msg_id"] == sent["msg_id"]
    assert (message["topic"], message["queue_id"], message["queue_offset"]) == (
        "TranTest",
        sent["queue_id"],
        sent["queue_offset"],
    )
    assert (message["tags"], message["keys"], message["body"]) == ("TagA", "k1", "hello")
    assert message["properties"]["p"] == "v"
    assert (
        before <= message["born_timestamp"] <= message["store_timestamp"] <= int(time.time() * 1000)
    )
    assert message["delivery_attempt"] == 1
    assert isinstance(message["receipt_handle"], str) and message["receipt_handle"]


def test_a_binary_message_is_received_as_base64(owner, consumer, topic, consumer_group):
    send_message(owner, body_base64="3q2+7w==")

    [message] = receive(consumer).json()["messages"]

    assert message["body_base64"] == "3q2+7w=="
    assert "body" not in message


def test_an_empty_topic_answers_no_messages(consumer, topic, consumer_group):
    response = receive(consumer)

    assert response.status_code == 200
    assert response.json() == {"messages": []}


def test_receive_defaults_hand_out_up_to_32_messages(owner, consumer, topic, consumer_group):
    for _ in range(40):
        send_message(owner)

    response = post(consumer, "/api/v1/consumer-groups/C/receive", {"topic": "TranTest"})

    assert response.status_code == 200
    assert len(response.json()["messages"]) == 32


def test_max_messages_limits_one_receive(owner, consumer, topic, consumer_group):
    for _ in range(5):
        send_message(owner)

    first = receive(consumer, max_messages=3).json()["messages"]
    rest = receive(consumer, max_messages=3).json()["messages"]

    assert len(first) == 3
    assert len(rest) == 2
    assert not {m["msg_id"] for m in first} & {m["msg_id"] for m in rest}


def test_a_received_message_is_invisible_to_the_groups_other_receivers(
    owner, consumer, topic, consumer_group
):
    send_message(owner)

    assert len(receive(consumer).json()["messages"]) == 1
    assert receive(consumer).json() == {"messages": []}


def test_every_consumer_group_sees_every_message(owner, consumer, topic, consumer_group):
    post(owner, "/api/v1/consumer-groups", {"name": "D"})
    msg_id = send_message(owner).json()["msg_id"]

    assert [m["msg_id"] for m in receive(consumer).json()["messages"]] == [msg_id]
    assert [m["msg_id"] for m in receive(owner, group="D").json()["messages"]] == [msg_id]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_messages", 0),
        ("max_messages", 33),
        ("invisible_duration_ms", 9_999),
        ("invisible_duration_ms", 43_200_001),
        ("wait_ms", -1),
        ("wait_ms", 30_001),
        ("max_messages", "many"),
    ],
)
def test_receive_outside_rocketmqs_bounds_is_invalid(consumer, topic, consumer_group, field, value):
    response = receive(consumer, **{field: value})

    error = assert_error(response, 400, "invalid_input")
    assert field in error["details"]["fields"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_messages", 1),
        ("max_messages", 32),
        ("invisible_duration_ms", 10_000),
        ("invisible_duration_ms", 43_200_000),
        ("wait_ms", 0),
    ],
)
def test_receive_at_rocketmqs_bounds_is_valid(consumer, topic, consumer_group, field, value):
    assert receive(consumer, **{field: value}).status_code == 200


def test_receive_waits_up_to_wait_ms_for_a_message(consumer, topic, consumer_group):
    started = time.monotonic()

    response = receive(consumer, wait_ms=300)

    assert response.json() == {"messages": []}
    assert time.monotonic() - started >= 0.3


def test_invisible_duration_sets_when_the_message_comes_back(
    owner, consumer, topic, consumer_group
):
    send_message(owner)
    before = int(time.time() * 1000)

    receive(consumer, invisible_duration_ms=60_000)

    delivery = Delivery.objects.get()
    assert before + 60_000 <= delivery.invisible_until_timestamp <= int(time.time() * 1000) + 60_000


def test_receiving_for_an_unknown_consumer_group_is_not_found(owner, topic):
    assert_error(receive(owner, group="Nope"), 404, "consumer_group_not_found")


def test_receiving_from_an_unknown_topic_is_not_found(consumer, consumer_group):
    error = assert_error(receive(consumer, topic="Nope"), 404, "topic_not_found")

    assert error["details"] == {"topic": "Nope"}


@pytest.mark.parametrize(
    "data",
    [{}, {"topic": "bad topic"}, {"topic": "TranTest", "wait_ms": None}],
    ids=["none", "bad", "null"],
)
def test_receive_needs_a_valid_topic_and_numbers(consumer, topic, consumer_group, data):
    response = post(consumer, "/api/v1/consumer-groups/C/receive", data)

    assert_error(response, 400, "invalid_input")


@pytest.mark.parametrize("name", ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"])
def test_half_and_op_messages_cannot_be_received_through_their_system_topic(
    owner, consumer, topic, producer_group, consumer_group, name
):
    transaction_id = send_half(owner).json()["transaction_id"]
    end(owner, send_half(owner).json()["transaction_id"], "rollback")

    response = receive(consumer, topic=name)

    assert_error(response, 403, "system_topic")
    assert not Delivery.objects.exists()
    assert owner.get(f"/api/v1/transactions/{transaction_id}").json()["state"] == "PREPARED"


def test_discarded_messages_cannot_be_received_through_trans_check_max_time_topic(
    owner, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(owner).json()["transaction_id"]
    with transaction.atomic():
        transaction_discard(
            Transaction.objects.select_for_update().get(pk=transaction_id), reason="check_max"
        )

    assert_error(receive(consumer, topic="TRANS_CHECK_MAX_TIME_TOPIC"), 403, "system_topic")
    assert not Delivery.objects.exists()


def test_a_dead_letter_topic_may_be_received(owner, consumer, topic, consumer_group):
    msg_id = send_message(owner).json()["msg_id"]
    for _ in range(3):  # consumer group C allows 3 delivery attempts
        assert len(receive(consumer).json()["messages"]) == 1
        Delivery.objects.update(invisible_until_timestamp=0)
    assert receive(consumer).json() == {"messages": []}  # moved to %DLQ%C

    response = receive(consumer, topic="%DLQ%C")

    assert response.status_code == 200
    assert [m["msg_id"] for m in response.json()["messages"]] == [msg_id]


# --- Ack -----------------------------------------------------------------------------------------


def test_a_consumer_acks_what_it_received(owner, consumer, topic, consumer_group):
    for _ in range(3):
        send_message(owner)
    handles = [m["receipt_handle"] for m in receive(consumer).json()["messages"]]

    response = ack(consumer, handles)

    assert response.status_code == 200
    assert response.json() == {"acked": 3, "failed": []}
    assert not Delivery.objects.exists()


def test_an_unknown_receipt_handle_is_reported_in_failed(owner, consumer, topic, consumer_group):
    send_message(owner)
    handle = receive(consumer).json()["messages"][0]["receipt_handle"]

    response = ack(consumer, [handle, "no-such-handle"])

    assert response.status_code == 200
    assert response.json() == {
        "acked": 1,
        "failed": [{"receipt_handle": "no-such-handle", "code": "invalid_receipt_handle"}],
    }


def test_acking_twice_fails_the_second_time(owner, consumer, topic, consumer_group):
    send_message(owner)
    handle = receive(consumer).json()["messages"][0]["receipt_handle"]
    ack(consumer, [handle])

    response = ack(consumer, [handle])

    assert response.json() == {
        "acked": 0,
        "failed": [{"receipt_handle": handle, "code": "invalid_receipt_handle"}],
    }


def test_a_group_may_not_ack_another_groups_receipt_handle(owner, consumer, topic, consumer_group):
    post(owner, "/api/v1/consumer-groups", {"name": "D"})
    send_message(owner)
    theirs = receive(owner, group="D").json()["messages"][0]["receipt_handle"]

    response = ack(consumer, [theirs])

    assert response.json()["acked"] == 0
    assert response.json()["failed"][0]["code"] == "invalid_receipt_handle"
    assert Delivery.objects.filter(consumer_group="D").count() == 1


def test_the_same_handle_twice_in_one_ack_is_acked_once(owner, consumer, topic, consumer_group):
    send_message(owner)
    handle = receive(consumer).json()["messages"][0]["receipt_handle"]

    response = ack(consumer, [handle, handle])

    assert response.json() == {"acked": 1, "failed": []}


@pytest.mark.parametrize(
    "data",
    [{}, {"receipt_handles": []}, {"receipt_handles": "abc"}, {"receipt_handles": ["x" * 65]}],
)
def test_an_invalid_ack_is_refused(consumer, consumer_group, data):
    response = post(consumer, "/api/v1/consumer-groups/C/ack", data)

    error = assert_error(response, 400, "invalid_input")
    assert "receipt_handles" in error["details"]["fields"]


def test_ack_for_an_unknown_consumer_group_is_404(owner, topic):
    response = owner.post(
        "/api/v1/consumer-groups/Nobody/ack", {"receipt_handles": ["x"]}, format="json"
    )
    assert_error(response, 404, "consumer_group_not_found")

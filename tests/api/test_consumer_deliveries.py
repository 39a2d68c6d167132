"""api-v1 Consumers: change a received message's invisible duration and forward it to the
dead-letter topic (RocketMQ 5 ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue)."""

from __future__ import annotations

import time

import pytest

from broker.models import Delivery, DeliveryEvent, Message
from broker.services.topology.writes import consumer_group_create
from tests.api_helpers import (
    ack,
    assert_error,
    end,
    key_client,
    post,
    receive,
    send_half,
    send_message,
)


def change(client, handle: str, invisible_duration_ms=60_000, group: str = "C"):
    return post(
        client,
        f"/api/v1/consumer-groups/{group}/change-invisible-duration",
        {"receipt_handle": handle, "invisible_duration_ms": invisible_duration_ms},
    )


def dead_letter(client, handle: str, group: str = "C"):
    return post(client, f"/api/v1/consumer-groups/{group}/dead-letter", {"receipt_handle": handle})


@pytest.fixture
def received(owner, consumer, topic, consumer_group) -> dict:
    """A message sent by the owner and received by the consumer (group C)."""
    send_message(owner, body="order 42")
    [message] = receive(consumer).json()["messages"]
    return message


# --- Change invisible duration -------------------------------------------------------------------


def test_a_change_answers_a_new_handle_that_acks_while_the_old_one_fails(consumer, received):
    before = int(time.time() * 1000)

    response = change(consumer, received["receipt_handle"], 60_000)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"receipt_handle", "invisible_until_timestamp"}
    assert body["receipt_handle"] != received["receipt_handle"]
    assert before + 60_000 <= body["invisible_until_timestamp"] <= time.time() * 1000 + 60_000
    assert ack(consumer, [received["receipt_handle"]]).json() == {
        "acked": 0,
        "failed": [
            {"receipt_handle": received["receipt_handle"], "code": "invalid_receipt_handle"}
        ],
    }
    assert ack(consumer, [body["receipt_handle"]]).json() == {"acked": 1, "failed": []}


def test_a_message_made_visible_at_once_is_received_again(consumer, received):
    assert receive(consumer).json() == {"messages": []}

    new = change(consumer, received["receipt_handle"], 0).json()

    [again] = receive(consumer).json()["messages"]
    assert again["msg_id"] == received["msg_id"]
    assert again["delivery_attempt"] == 2
    assert again["receipt_handle"] != new["receipt_handle"]


def test_the_bounds_of_invisible_duration_ms(consumer, received):
    handle = received["receipt_handle"]
    for bad in (-1, 43_200_001, "60000", 1.5, None):
        error = assert_error(change(consumer, handle, bad), 400, "invalid_input")
        assert list(error["details"]["fields"]) == ["invisible_duration_ms"]
    error = assert_error(
        post(
            consumer,
            "/api/v1/consumer-groups/C/change-invisible-duration",
            {"receipt_handle": handle},
        ),
        400,
        "invalid_input",
    )
    assert list(error["details"]["fields"]) == ["invisible_duration_ms"]
    assert Delivery.objects.get().receipt_handle == handle  # every refusal changed nothing
    assert change(consumer, handle, 43_200_000).status_code == 200


# --- Dead letter ---------------------------------------------------------------------------------


def test_a_dead_letter_lands_on_the_groups_dlq_once(owner, consumer, received):
    response = dead_letter(consumer, received["receipt_handle"])

    assert response.status_code == 204
    assert response.content == b""
    [dead] = Message.objects.filter(topic="%DLQ%C")
    assert dead.msg_id == received["msg_id"]
    assert list(
        DeliveryEvent.objects.filter(kind="dead_lettered").values_list(
            "consumer_group", "msg_id", "delivery_attempt"
        )
    ) == [("C", received["msg_id"], 1)]
    assert_error(dead_letter(consumer, received["receipt_handle"]), 404, "invalid_receipt_handle")
    assert Message.objects.filter(topic="%DLQ%C").count() == 1
    assert receive(consumer).json() == {"messages": []}
    [from_dlq] = receive(consumer, topic="%DLQ%C").json()["messages"]
    assert (from_dlq["msg_id"], from_dlq["body"]) == (received["msg_id"], "order 42")


def test_a_committed_transactions_timeline_shows_its_dead_letter(
    owner, producer, consumer, topic, producer_group, consumer_group
):
    tx = send_half(producer).json()["transaction_id"]
    assert end(producer, tx, "commit").status_code == 200
    [message] = receive(consumer).json()["messages"]

    assert dead_letter(consumer, message["receipt_handle"]).status_code == 204

    events = owner.get(f"/api/v1/transactions/{tx}/timeline").json()["timeline"]
    [dead] = [e for e in events if e["kind"] == "consumer_dead_lettered"]
    assert dead["detail"]["delivery_attempt"] == 1


# --- Errors and permissions ----------------------------------------------------------------------


@pytest.mark.parametrize("call", [change, dead_letter])
def test_a_bad_handle_is_404_invalid_receipt_handle(consumer, received, call):
    error = assert_error(call(consumer, "no-such-handle"), 404, "invalid_receipt_handle")
    assert error["details"] == {"consumer_group": "C", "receipt_handle": "no-such-handle"}


@pytest.mark.parametrize("call", [change, dead_letter])
def test_another_groups_handle_is_refused(owner, received, call):
    consumer_group_create(name="D")
    other = key_client("other-consumer", consumer_groups=["D"])

    error = assert_error(call(other, received["receipt_handle"], group="D"), 404)

    assert error["code"] == "invalid_receipt_handle"
    assert error["details"]["consumer_group"] == "D"
    assert Delivery.objects.get().receipt_handle == received["receipt_handle"]
    assert not Message.objects.filter(topic__startswith="%DLQ%").exists()


@pytest.mark.parametrize("call", [change, dead_letter])
def test_a_key_without_the_group_may_not_act_for_it(outsider, consumer, received, call):
    consumer_group_create(name="D")

    error = assert_error(call(outsider, received["receipt_handle"]), 403, "permission_denied")
    assert error["details"] == {"consumer_group": "C"}
    assert_error(call(consumer, received["receipt_handle"], group="D"), 403, "permission_denied")
    assert Delivery.objects.get().receipt_handle == received["receipt_handle"]


@pytest.mark.parametrize("call", [change, dead_letter])
def test_an_unknown_group_is_404(owner, received, call):
    error = assert_error(call(owner, received["receipt_handle"], group="Nobody"), 404)
    assert error["code"] == "consumer_group_not_found"


@pytest.mark.parametrize("call", [change, dead_letter])
def test_an_anonymous_call_is_401(anonymous, received, call):
    assert_error(call(anonymous, received["receipt_handle"]), 401, "not_authenticated")

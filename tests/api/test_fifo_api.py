"""api-v1 FIFO message groups: ``message_group`` on a send (stored in the group's queue, read
back), its refusals, and a consumer group's ``fifo`` setting (create, PATCH) ordering its
receives."""

from __future__ import annotations

import pytest

from broker.models import ConsumerGroup, Message
from broker.rules.fifo import message_group_queue
from tests.api_helpers import ack, assert_error, post, receive, send_message


def patch(client, path: str, data: dict):
    return client.patch(path, data, format="json")


def test_a_message_group_is_stored_in_its_queue_and_read_back(
    owner, consumer, topic, consumer_group
):
    sent = [send_message(owner, body=f"s{i}", message_group="order-7").json() for i in range(3)]
    assert {s["queue_id"] for s in sent} == {message_group_queue("order-7", topic.queue_nums)}
    assert [s["queue_offset"] for s in sent] == [0, 1, 2]
    assert Message.objects.get(pk=sent[0]["commit_log_offset"]).message_group == "order-7"
    messages = receive(consumer).json()["messages"]
    assert [m["message_group"] for m in messages] == ["order-7"] * 3
    looked_up = owner.get(f"/api/v1/messages/{sent[0]['msg_id']}")
    assert looked_up.status_code == 200
    assert looked_up.json()["message_group"] == "order-7"


def test_a_message_without_a_group_reads_an_empty_one(owner, consumer, topic, consumer_group):
    send_message(owner)
    [message] = receive(consumer).json()["messages"]
    assert message["message_group"] == ""


@pytest.mark.parametrize("group", ["", " ", "x" * 65, "a\nb"])
def test_an_illegal_message_group_is_refused(owner, topic, group):
    response = send_message(owner, message_group=group)
    assert response.status_code == 400
    assert_error(response, 400)
    assert not Message.objects.exists()


@pytest.mark.parametrize("timed", [{"delay_level": 3}, {"deliver_at": 4_000_000_000_000}])
def test_a_fifo_message_may_not_be_delayed(owner, topic, timed):
    assert_error(send_message(owner, message_group="g", **timed), 400, "message_type_conflict")


def test_a_consumer_group_is_created_fifo_and_patched(owner):
    created = post(owner, "/api/v1/consumer-groups", {"name": "F", "fifo": True})
    assert created.status_code == 201
    assert created.json()["fifo"] is True
    plain = post(owner, "/api/v1/consumer-groups", {"name": "P"}).json()
    assert plain["fifo"] is False
    patched = patch(owner, "/api/v1/consumer-groups/P", {"fifo": True})
    assert patched.status_code == 200
    assert patched.json()["fifo"] is True
    assert patched.json()["max_delivery_attempts"] == 16
    again = patch(owner, "/api/v1/consumer-groups/P", {"max_delivery_attempts": 4})
    assert (again.json()["fifo"], again.json()["max_delivery_attempts"]) == (True, 4)
    assert ConsumerGroup.objects.get(name="P").fifo


@pytest.mark.parametrize("data", [{}, {"fifo": "yes"}, {"fifo": 1}])
def test_a_bad_consumer_group_patch_is_refused(owner, consumer_group, data):
    assert_error(patch(owner, "/api/v1/consumer-groups/C", data), 400, "invalid_input")


def test_a_fifo_consumer_group_receives_each_groups_head_until_its_ack(
    owner, consumer, topic, consumer_group
):
    patch(owner, "/api/v1/consumer-groups/C", {"fifo": True})
    for i in range(2):
        send_message(owner, body=f"a{i}", message_group="a")
        send_message(owner, body=f"b{i}", message_group="b")
    first = receive(consumer).json()["messages"]
    assert sorted(m["body"] for m in first) == ["a0", "b0"]
    assert receive(consumer).json()["messages"] == []
    ack(consumer, [m["receipt_handle"] for m in first if m["body"] == "a0"])
    assert [m["body"] for m in receive(consumer).json()["messages"]] == ["a1"]


def test_a_batch_keeps_a_groups_order_and_refuses_a_delayed_fifo_item(owner, topic):
    items = [
        {"topic": "TranTest", "body": f"s{i}", "message_group": "order-7"} for i in range(3)
    ] + [{"topic": "TranTest", "body": "late", "message_group": "order-7", "delay_level": 2}]
    response = post(owner, "/api/v1/messages/batch", {"messages": items})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["status"] for r in results] == [201, 201, 201, 400]
    assert results[3]["error"]["code"] == "message_type_conflict"
    queue = message_group_queue("order-7", topic.queue_nums)
    assert [(r["body"]["queue_id"], r["body"]["queue_offset"]) for r in results[:3]] == [
        (queue, 0),
        (queue, 1),
        (queue, 2),
    ]

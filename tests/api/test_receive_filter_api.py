"""api-v1 receive's ``filter`` (docs/api.md "Filters"), the contract's refusal of a malformed
one, a consumer group's subscriptions, and a message's deliveries saying "filtered out"."""

from __future__ import annotations

import pytest

from tests.api_helpers import ack, assert_error, post, send_message


def receive_filtered(client, expression: str, kind: str = "TAG", **fields):
    return post(
        client,
        "/api/v1/consumer-groups/C/receive",
        {"topic": "TranTest", "filter": {"type": kind, "expression": expression}, **fields},
    )


def test_a_tag_filter_receives_only_its_tags(owner, consumer, topic, consumer_group):
    tags = ("TagA", "TagB", "TagC", "TagA")
    sent = [send_message(owner, tags=t, body=t).json()["msg_id"] for t in tags]

    response = receive_filtered(consumer, "TagA || TagC")

    assert response.status_code == 200, response.content
    got = response.json()["messages"]
    assert sorted(m["msg_id"] for m in got) == sorted(
        msg_id for msg_id, t in zip(sent, tags, strict=True) if t != "TagB"
    )
    assert sorted(m["tags"] for m in got) == ["TagA", "TagA", "TagC"]
    assert ack(consumer, [m["receipt_handle"] for m in got]).json()["acked"] == 3
    # The TagB message counts as consumed: a receive of every message finds nothing.
    assert post(consumer, "/api/v1/consumer-groups/C/receive", {"topic": "TranTest"}).json() == {
        "messages": []
    }


def test_an_sql92_filter_reads_the_properties(owner, consumer, topic, consumer_group):
    for a in ("3", "8", "12"):
        send_message(owner, properties={"a": a, "region": "eu"})

    response = receive_filtered(consumer, "a BETWEEN 5 AND 10 AND region = 'eu'", "SQL92")

    assert [m["properties"]["a"] for m in response.json()["messages"]] == ["8"]


@pytest.mark.parametrize(
    ("expression", "position"), [("a >", 4), ("a > 5 AND", 10), ("a IN (1)", 7)]
)
def test_a_malformed_sql92_filter_is_refused_with_its_position(
    owner, consumer, topic, consumer_group, expression, position
):
    send_message(owner, properties={"a": "9"})

    error = assert_error(
        receive_filtered(consumer, expression, "SQL92"), 400, "illegal_filter_expression"
    )

    assert error["details"] == {"type": "SQL92", "expression": expression, "position": position}
    assert f"position {position}" in error["message"]
    # Nothing was taken: the message is still there for a good receive.
    assert len(receive_filtered(consumer, "a > 5", "SQL92").json()["messages"]) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "REGEX", "expression": "a"},
        {"type": "TAG", "expression": 5},
        {"type": "TAG", "expression": "x" * 4097},
        "TagA",
    ],
)
def test_a_filter_of_the_wrong_shape_is_invalid_input(consumer, topic, consumer_group, bad):
    response = post(
        consumer, "/api/v1/consumer-groups/C/receive", {"topic": "TranTest", "filter": bad}
    )
    assert_error(response, 400, "invalid_input")


def test_a_groups_subscriptions_are_listed(owner, consumer, topic, consumer_group, outsider):
    receive_filtered(consumer, "TagA || TagB")

    response = consumer.get("/api/v1/consumer-groups/C/subscriptions")

    assert response.status_code == 200
    body = response.json()
    assert body["consumer_group"] == "C"
    [row] = body["subscriptions"]
    assert (row["topic"], row["expression_type"], row["expression"]) == (
        "TranTest",
        "TAG",
        "TagA || TagB",
    )
    assert isinstance(row["updated_timestamp"], int)
    assert_error(outsider.get("/api/v1/consumer-groups/C/subscriptions"), 403)
    assert_error(owner.get("/api/v1/consumer-groups/nobody/subscriptions"), 404)


def test_a_message_filtered_out_says_so_in_its_deliveries(owner, consumer, topic, consumer_group):
    sent = send_message(owner, tags="TagB").json()
    receive_filtered(consumer, "TagA")

    response = owner.get(f"/api/v1/messages/{sent['msg_id']}/deliveries")

    assert response.status_code == 200, response.content
    [delivery] = response.json()["deliveries"]
    assert (delivery["consumer_group"], delivery["state"]) == ("C", "filtered_out")

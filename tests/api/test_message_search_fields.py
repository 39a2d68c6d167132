"""The message search (``GET /api/v1/message-search``) finds delay
messages by their due time and the topic they are for, whatever became of them, and FIFO
messages by their message group; a recall's delete marker is found on the timer topic."""

from __future__ import annotations

import pytest

from broker.constants import PROPERTY_TIMER_DEL_UNIQKEY, TIMER_TOPIC
from broker.models import Message
from broker.rules.clock import now_ms
from broker.services.topology.writes import topic_create
from tests.api_helpers import assert_error, post, send_message

HOUR = 3_600_000


@pytest.fixture
def setup(topic, producer_group, consumer_group):
    """TranTest (4 queues), producer group G, consumer group C; and topic Other."""
    topic_create(name="Other", queue_nums=1)


def search(client, **query) -> list[dict]:
    response = client.get("/api/v1/message-search", query)
    assert response.status_code == 200, response.content
    return response.json()["messages"]


def test_delay_messages_by_due_time_state_and_the_topic_they_are_for(producer, owner, setup):
    now = now_ms()
    for msg_id, topic, due in (
        ("D-1", "TranTest", now + HOUR),
        ("D-2", "TranTest", now + 2 * HOUR),
        ("D-3", "Other", now + HOUR + 1),
    ):
        sent = send_message(producer, topic=topic, msg_id=msg_id, deliver_at=due)
        assert sent.status_code == 201, sent.content
    recalled = post(owner, "/api/v1/scheduled-messages/D-2/recall", {"reason": "paid"})
    assert recalled.status_code == 200, recalled.content

    def ids(**query) -> list[str]:
        return sorted(m["msg_id"] for m in search(owner, **query))

    assert ids(due_start=now + HOUR, due_end=now + HOUR + 2) == ["D-1", "D-3"]
    assert ids(due_start=now + HOUR + 1) == ["D-2", "D-3"]
    assert ids(due_end=now + HOUR + 1) == ["D-1"]
    # With a schedule filter, topic names the topic they are for, not the timer topic.
    assert ids(topic="TranTest", scheduled_state="SCHEDULED") == ["D-1"]
    assert ids(topic="TranTest", due_start=now) == ["D-1", "D-2"]
    assert ids(topic="Other", scheduled_state="RECALLED") == []
    assert ids(scheduled_state="RECALLED", due_start=now + 2 * HOUR) == ["D-2"]
    (found,) = search(owner, topic="TranTest", scheduled_state="RECALLED")
    assert (found["topic"], found["kind"], found["scheduled"]) == (
        TIMER_TOPIC,
        "scheduled",
        {"state": "RECALLED", "delivery_timestamp": now + 2 * HOUR},
    )
    # The recall's delete marker: on the timer topic, its own msg id, no schedule.
    marker = Message.objects.get(**{f"properties__{PROPERTY_TIMER_DEL_UNIQKEY}": "TranTest+D-2"})
    (shown,) = search(owner, msg_id=marker.msg_id)
    assert (shown["topic"], shown["kind"], shown["scheduled"]) == (TIMER_TOPIC, "scheduled", None)

    assert_error(owner.get("/api/v1/message-search", {"due_start": 5, "due_end": 5}), 400)
    assert_error(owner.get("/api/v1/message-search", {"due_start": "x"}), 400)


def test_fifo_messages_by_their_message_group(producer, owner, setup):
    sent = [send_message(producer, msg_id=f"F-{n}").json() for n in range(3)]
    # FIFO sends write the column (issue 38); set it as they do.
    Message.objects.filter(msg_id__in=["F-0", "F-2"]).update(message_group="order-7")
    Message.objects.filter(msg_id="F-1").update(message_group="order-8")

    found = search(owner, message_group="order-7")
    assert [m["msg_id"] for m in found] == ["F-2", "F-0"]  # newest first
    assert {m["message_group"] for m in found} == {"order-7"}
    assert [m["msg_id"] for m in search(owner, message_group="order-7", topic="Other")] == []
    assert search(owner, msg_id="F-1")[0]["message_group"] == "order-8"
    assert len(sent) == 3
    assert_error(owner.get("/api/v1/message-search", {"message_group": "g" * 65}), 400)

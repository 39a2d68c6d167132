"""api-v1 delay messages (issue 38): ``POST /messages`` (and its batch) with ``deliver_at`` or
``delay_level`` stores a message that waits for its time and answers its recall handle; every
refusal; half messages refuse a delivery time; ``/scheduled-messages``: the list by due time,
one with its timeline, a producer's recall by handle and an operator's by msg_id (audited),
with their rights and refusals."""

from __future__ import annotations

import pytest

from broker.models import AuditEntry, Message, ScheduledMessage, Transaction
from broker.rules.clock import now_ms
from broker.rules.timers import recall_handle_of
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.topology.writes import producer_group_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, key_client, post, receive, send_half, send_message

HOUR = 3_600_000
SEND_RESULT = {"status", "msg_id", "topic", "queue_id", "queue_offset", "commit_log_offset"}


@pytest.fixture
def setup(topic, producer_group, consumer_group):
    """TranTest (4 queues), producer group G, consumer group C."""


def later(ms: int = HOUR) -> int:
    return now_ms() + ms


def scheduled(client, **fields) -> dict:
    """A message sent for later through ``POST /messages``; its answer (asserted 201)."""
    response = send_message(client, **{"deliver_at": later(), **fields})
    assert response.status_code == 201, response.content
    return response.json()


# --- Send ----------------------------------------------------------------------------------------


def test_a_message_sent_for_later_waits_and_answers_its_recall_handle(producer, consumer, setup):
    due = later()
    response = send_message(producer, deliver_at=due, body="cancel order 7", keys="o7")

    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == SEND_RESULT | {"delivery_timestamp", "state", "recall_handle"}
    row = ScheduledMessage.objects.get()
    assert body["status"] == "SEND_OK" and body["state"] == "SCHEDULED"
    assert (body["msg_id"], body["topic"], body["queue_id"]) == (
        row.msg_id,
        "TranTest",
        row.queue_id,
    )
    assert body["delivery_timestamp"] == due == row.delivery_timestamp
    assert body["commit_log_offset"] == row.commit_log_offset  # where it waits
    waiting = Message.objects.get(pk=row.commit_log_offset)
    assert (waiting.topic, waiting.queue_id) == ("RMQ_SYS_WHEEL_TIMER", 0)
    assert body["queue_offset"] == waiting.queue_offset
    assert body["recall_handle"] == recall_handle_of(
        topic="TranTest", delivery_timestamp=due, msg_id=row.msg_id
    )  # what gRPC's SendMessage answers
    assert row.producer_group == "G"
    assert receive(consumer).json()["messages"] == []

    assert scheduled_messages_deliver(now=due) == 1
    got = receive(consumer).json()["messages"]
    assert [(m["msg_id"], m["body"], m["keys"]) for m in got] == [
        (body["msg_id"], "cancel order 7", "o7")
    ]


def test_a_delay_level_counts_from_the_send(producer, setup):
    before = now_ms()
    response = send_message(producer, delay_level=3)
    after = now_ms()

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "SCHEDULED"
    assert before + 10_000 <= body["delivery_timestamp"] <= after + 10_000


def test_a_time_now_or_past_is_a_normal_send(producer, consumer, setup):
    response = send_message(producer, deliver_at=now_ms() - 5000, body="late")

    assert response.status_code == 201
    assert set(response.json()) == SEND_RESULT
    assert not ScheduledMessage.objects.exists()
    assert [m["body"] for m in receive(consumer).json()["messages"]] == ["late"]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"delay_level": 0}, "illegal_delay_level"),
        ({"delay_level": 19}, "illegal_delay_level"),
        ({"delay_level": 1, "deliver_at": 1}, "delivery_time_conflict"),
        ({"deliver_at": -1}, "invalid_input"),
        ({"deliver_at": "soon"}, "invalid_input"),
        ({"delay_level": 2.5}, "invalid_input"),
    ],
)
def test_a_bad_delivery_time_is_refused_and_nothing_is_stored(producer, setup, fields, code):
    assert_error(send_message(producer, **fields), 400, code)
    assert not Message.objects.exists()


def test_more_than_the_maximum_delay_ahead_is_refused(producer, setup, broker_settings):
    broker_settings["HALFMOON_TIMER_MAX_DELAY_SEC"] = 60

    error = assert_error(send_message(producer, deliver_at=later(70_000)), 400)

    assert error["code"] == "illegal_delivery_time"
    assert error["details"]["max_delay_seconds"] == 60
    assert not Message.objects.exists()
    assert send_message(producer, deliver_at=later(59_000)).status_code == 201


@pytest.mark.parametrize("fields", [{"deliver_at": HOUR}, {"delay_level": 2}])
def test_a_half_message_takes_no_delivery_time(producer, setup, fields):
    error = assert_error(send_half(producer, **fields), 400, "message_type_conflict")

    assert set(error["details"]["fields"]) == set(fields)
    assert not Transaction.objects.exists() and not Message.objects.exists()
    batch = post(producer, "/api/v1/transactions/batch", {"messages": [
        {"producer_group": "G", "topic": "TranTest", "body": "x", **fields},
        {"producer_group": "G", "topic": "TranTest", "body": "y"},
    ]}).json()["results"]  # fmt: skip
    assert [r["status"] for r in batch] == [400, 201]
    assert batch[0]["error"]["code"] == "message_type_conflict"


def test_a_resend_with_the_same_msg_id_stores_nothing_new(producer, setup):
    due = later()
    first = scheduled(producer, deliver_at=due, msg_id="ORDER-7-CANCEL")
    again = scheduled(producer, deliver_at=due, msg_id="ORDER-7-CANCEL")

    assert again == first
    assert ScheduledMessage.objects.count() == 1 == Message.objects.count()
    one = send_message(producer, msg_id="ORDER-8").json()
    assert send_message(producer, msg_id="ORDER-8").json() == one  # a normal send too
    assert Message.objects.filter(msg_id="ORDER-8").count() == 1
    assert_error(send_message(producer, msg_id="not an id!"), 400, "invalid_input")


def test_a_batch_sends_messages_for_now_and_for_later(producer, consumer, setup):
    due = later()
    items = [
        {"topic": "TranTest", "body": "now"},
        {"topic": "TranTest", "body": "at", "deliver_at": due, "msg_id": "B-1"},
        {"topic": "TranTest", "body": "level", "delay_level": 1},
        {"topic": "TranTest", "body": "past", "deliver_at": 1},
        {"topic": "TranTest", "body": "both", "deliver_at": due, "delay_level": 1},
        {"topic": "TranTest", "body": "at again", "deliver_at": due, "msg_id": "B-1"},
        {"topic": "Nowhere", "body": "lost", "delay_level": 1},
    ]
    response = post(producer, "/api/v1/messages/batch", {"messages": items})

    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [201, 201, 201, 201, 400, 201, 404]
    bodies = [r.get("body", {}) for r in results]
    assert [b.get("state") for b in bodies] == [None, "SCHEDULED", "SCHEDULED", None, None, "SCHEDULED", None]  # fmt: skip
    assert results[4]["error"]["code"] == "delivery_time_conflict"
    assert bodies[5] == bodies[1] and bodies[1]["delivery_timestamp"] == due
    assert ScheduledMessage.objects.count() == 2
    assert sorted(m["body"] for m in receive(consumer).json()["messages"]) == ["now", "past"]


# --- Recall by handle ----------------------------------------------------------------------------


def recall(client, body: dict):
    return post(client, "/api/v1/scheduled-messages/recall", body)


def test_a_producer_recalls_by_handle_and_it_is_never_delivered(producer, consumer, setup):
    sent = scheduled(producer)
    handle = {"topic": "TranTest", "recall_handle": sent["recall_handle"]}

    response = recall(producer, handle)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["msg_id"], body["state"]) == (sent["msg_id"], "RECALLED")
    assert body["recalled_by"] == "producer:producer"
    assert recall(producer, handle).json() == body  # again: unchanged
    assert scheduled_messages_deliver(now=later(2 * HOUR)) == 0
    assert receive(consumer).json()["messages"] == []
    assert not AuditEntry.objects.exists()  # a producer's recall, not an operator action


def test_a_recall_is_refused_when_it_cannot_be_done(producer, owner, setup):
    sent = scheduled(producer)
    row = ScheduledMessage.objects.get()
    handle = sent["recall_handle"]
    other_topic = recall_handle_of(topic="Other", delivery_timestamp=1, msg_id=row.msg_id)
    unknown = recall_handle_of(topic="TranTest", delivery_timestamp=1, msg_id="NOPE")

    assert_error(recall(producer, {"topic": "TranTest", "recall_handle": "bm9wZQ=="}), 400, "invalid_recall_handle")  # fmt: skip
    assert_error(recall(producer, {"topic": "TranTest", "recall_handle": other_topic}), 400, "invalid_recall_handle")  # fmt: skip
    assert_error(recall(producer, {"topic": "TranTest", "recall_handle": "no spaces"}), 400, "invalid_input")  # fmt: skip
    assert_error(recall(producer, {"topic": "TranTest", "recall_handle": unknown}), 404, "scheduled_message_not_found")  # fmt: skip
    producer_group_create(name="H", check_url=None)
    assert_error(recall(key_client("h-producer", producer_groups=["H"]), {"topic": "TranTest", "recall_handle": handle}), 403, "permission_denied")  # fmt: skip

    ScheduledMessage.objects.filter(pk=row.pk).update(delivery_timestamp=now_ms() - 1)
    late = assert_error(recall(producer, {"topic": "TranTest", "recall_handle": handle}), 409)
    assert late["code"] == "recall_too_late"
    assert late["details"]["state"] == "SCHEDULED"
    assert scheduled_messages_deliver() == 1
    late = assert_error(recall(owner, {"topic": "TranTest", "recall_handle": handle}), 409)
    assert late["details"]["state"] == "DELIVERED"


# --- An operator's recall ------------------------------------------------------------------------


def operator_recall(client, msg_id: str, reason: str | None = "customer paid"):
    return post(
        client,
        f"/api/v1/scheduled-messages/{msg_id}/recall",
        {} if reason is None else {"reason": reason},
    )


def test_an_operator_recalls_with_a_reason_and_it_is_audited(producer, owner, setup):
    msg_id = scheduled(producer)["msg_id"]

    assert_error(operator_recall(owner, msg_id, None), 400, "reason_required")
    assert_error(operator_recall(owner, msg_id, "  "), 400, "reason_required")
    response = operator_recall(owner, msg_id)

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "RECALLED"
    assert response.json()["recall_reason"] == "customer paid"
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.via, entry.action, entry.reason) == (
        "operator:owner", "api", "recall-message", "customer paid",
    )  # fmt: skip
    assert entry.scope == {"topic": "TranTest", "msg_id": msg_id}
    assert operator_recall(owner, msg_id).status_code == 200  # again: unchanged
    assert AuditEntry.objects.count() == 1
    assert_error(operator_recall(owner, "NOPE"), 404, "scheduled_message_not_found")


def test_who_may_recall_as_an_operator(producer, setup):
    producer_group_create(name="H", check_url=None)
    msg_id = scheduled(producer)["msg_id"]  # of producer group G
    h_ops = scoped_key("h-ops", producer=["H"])
    g_ops = scoped_key("g-ops", producer=["G"])

    assert_error(operator_recall(h_ops, msg_id), 403, "permission_denied")
    assert_error(operator_recall(key_client("h-producer", producer_groups=["H"]), msg_id), 403)
    assert operator_recall(g_ops, msg_id).status_code == 200
    assert ScheduledMessage.objects.get().recalled_by == "operator:g-ops"

    ScheduledMessage.objects.update(state="SCHEDULED", delivery_timestamp=now_ms() - 1)
    late = assert_error(operator_recall(producer, msg_id), 409, "recall_too_late")
    assert late["details"]["msg_id"] == msg_id


# --- Reads ---------------------------------------------------------------------------------------


def test_the_list_is_by_due_time_filtered_and_paginated(producer, owner, setup):
    due = later()
    for i, keys in enumerate(["a", "b c", "a", "d"]):
        scheduled(producer, deliver_at=due + (3 - i) * 1000, keys=keys, msg_id=f"L-{i}")
    operator_recall(owner, "L-2")

    page = owner.get("/api/v1/scheduled-messages", {"page_size": 3}).json()
    assert page["count"] == 4 and page["next"] and page["previous"] is None
    assert [r["msg_id"] for r in page["results"]] == ["L-3", "L-2", "L-1"]  # earliest due first
    assert page["results"][1]["recall_handle"]

    def ids(**query) -> list[str]:
        return [r["msg_id"] for r in owner.get("/api/v1/scheduled-messages", query).json()["results"]]  # fmt: skip

    assert ids(state="SCHEDULED") == ["L-3", "L-1", "L-0"]
    assert ids(state="RECALLED") == ["L-2"]
    assert ids(key="a") == ["L-2", "L-0"]
    assert ids(key="c") == ["L-1"]
    assert ids(due_after=due + 1000, due_before=due + 3000) == ["L-2", "L-1"]
    assert ids(topic="Other") == [] and ids(msg_id="L-0") == ["L-0"]
    assert ids(producer_group="G") == ["L-3", "L-2", "L-1", "L-0"]
    assert_error(owner.get("/api/v1/scheduled-messages", {"state": "LOST"}), 400, "invalid_input")
    assert_error(owner.get("/api/v1/scheduled-messages", {"page": 9}), 404, "not_found")


def test_a_key_reads_the_scheduled_messages_of_its_groups_only(producer, outsider, setup):
    producer_group_create(name="H", check_url=None)
    msg_id = scheduled(producer)["msg_id"]
    h_producer = key_client("h-producer", producer_groups=["H"])
    g_ops = scoped_key("g-ops", producer=["G"])

    assert h_producer.get("/api/v1/scheduled-messages").json()["count"] == 0
    assert g_ops.get("/api/v1/scheduled-messages").json()["count"] == 1
    assert producer.get("/api/v1/scheduled-messages").json()["count"] == 1
    assert_error(h_producer.get(f"/api/v1/scheduled-messages/{msg_id}"), 404, "scheduled_message_not_found")  # fmt: skip
    assert g_ops.get(f"/api/v1/scheduled-messages/{msg_id}").status_code == 200
    assert_error(outsider.get("/api/v1/scheduled-messages"), 403, "permission_denied")


def test_a_scheduled_messages_timeline(producer, owner, setup):
    kept, gone = scheduled(producer, msg_id="T-1"), scheduled(producer, msg_id="T-2")
    operator_recall(owner, "T-2", "order paid")

    waiting = owner.get("/api/v1/scheduled-messages/T-1").json()
    assert [(e["kind"], e["reached"]) for e in waiting["timeline"]] == [("sent", True), ("due", False)]  # fmt: skip
    assert waiting["timeline"][1]["timestamp"] == kept["delivery_timestamp"]
    assert waiting["recall_handle"] == kept["recall_handle"]

    recalled = owner.get("/api/v1/scheduled-messages/T-2").json()
    assert [e["kind"] for e in recalled["timeline"]] == ["sent", "recalled", "due"]
    assert (recalled["timeline"][1]["actor"], recalled["timeline"][1]["reason"]) == (
        "operator:owner", "order paid",
    )  # fmt: skip
    assert recalled["timeline"][2]["reached"] is False and gone["msg_id"] == "T-2"

    scheduled_messages_deliver(now=kept["delivery_timestamp"])
    delivered = owner.get("/api/v1/scheduled-messages/T-1").json()
    copy = Message.objects.get(topic="TranTest", msg_id="T-1")
    assert [e["kind"] for e in delivered["timeline"]] == ["sent", "due", "delivered"]
    assert delivered["timeline"][2]["commit_log_offset"] == copy.commit_log_offset
    assert delivered["delivered_commit_log_offset"] == copy.commit_log_offset
    assert_error(owner.get("/api/v1/scheduled-messages/NOPE"), 404, "scheduled_message_not_found")


def test_the_message_search_finds_scheduled_and_recalled_messages(producer, owner, setup):
    scheduled(producer, msg_id="S-1")
    scheduled(producer, msg_id="S-2")
    operator_recall(owner, "S-2")
    send_message(producer, msg_id="N-1")

    def search(**query) -> list[dict]:
        return owner.get("/api/v1/message-search", query).json()["messages"]

    recalled = search(scheduled_state="RECALLED")
    assert [(m["msg_id"], m["kind"], m["topic"]) for m in recalled] == [
        ("S-2", "scheduled", "RMQ_SYS_WHEEL_TIMER")
    ]
    assert recalled[0]["scheduled"]["state"] == "RECALLED"
    assert [m["msg_id"] for m in search(scheduled_state="SCHEDULED")] == ["S-1"]
    assert search(msg_id="N-1")[0]["scheduled"] is None
    assert_error(owner.get("/api/v1/message-search", {"scheduled_state": "x"}), 400)

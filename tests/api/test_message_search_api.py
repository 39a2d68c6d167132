"""``GET /api/v1/message-search`` and ``GET /api/v1/messages/{msg_id}/deliveries``: the
console's message search in JSON, with an access key's rights (an admin key every message, a
producer key its groups' messages) and the contract's 400 for a bad query."""

from __future__ import annotations

import pytest

from broker.models import ArchiveSegment, ArchiveWatermark
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import producer_group_create
from tests.api_helpers import assert_error

URL = "/api/v1/message-search"


@pytest.fixture
def sent(topic, producer_group, consumer_group):
    producer_group_create(name="H", check_url=None)
    mine = [
        message_send(topic="TranTest", body=b"x", keys=f"ORDER-{i} shared", producer_group="G")
        for i in range(5)
    ]
    theirs = message_send(topic="TranTest", body=b"y", keys="ORDER-9 shared", producer_group="H")
    return mine, theirs


def test_an_admin_finds_a_message_by_key_and_pages_through_a_topic(owner, sent):
    mine, theirs = sent

    by_key = owner.get(URL, {"key": "ORDER-3"}).json()
    first = owner.get(URL, {"topic": "TranTest", "limit": 4}).json()
    second = owner.get(URL, {"topic": "TranTest", "limit": 4, "before": first["next_before"]})

    assert [m["msg_id"] for m in by_key["messages"]] == [mine[3].msg_id]
    assert by_key["messages"][0]["kind"] == "normal"
    assert by_key["next_before"] is None and by_key["archive"] is None
    assert len(first["messages"]) == 4 and first["previous_after"] is None
    assert second.status_code == 200
    assert [m["commit_log_offset"] for m in first["messages"] + second.json()["messages"]] == [
        m.commit_log_offset for m in [theirs, *reversed(mine)]
    ]
    newer = owner.get(URL, {"topic": "TranTest", "after": second.json()["previous_after"]})
    assert (
        newer.json()["messages"][-1]["commit_log_offset"]
        == first["messages"][-1]["commit_log_offset"]
    )


def test_a_producer_key_sees_its_groups_messages_only(producer, outsider, sent):
    mine, theirs = sent

    shared = producer.get(URL, {"key": "shared"}).json()["messages"]

    assert {m["producer_group"] for m in shared} == {"G"}
    assert len(shared) == 5
    assert producer.get(URL, {"msg_id": theirs.msg_id}).json()["messages"] == []
    assert_error(outsider.get(URL, {"key": "shared"}), 403, "permission_denied")
    assert_error(producer.get(f"/api/v1/messages/{theirs.msg_id}/deliveries"), 404)


@pytest.mark.parametrize(
    "query",
    [
        {"topic": "no/such"},
        {"msg_id": "bad id"},
        {"start": "yesterday"},
        {"start": 10, "end": 5},
        {"before": "12"},
        {"before": "1.2", "after": "3.4"},
        {"limit": 0},
        {"limit": 201},
    ],
)
def test_a_bad_query_is_the_contracts_400(owner, db, query):
    assert_error(owner.get(URL, query), 400, "invalid_input")


def test_a_pruned_period_names_its_archive_segments(owner, db):
    ArchiveWatermark.objects.create(
        name="logs", archived_until_timestamp=3_600_000, pruned_until_timestamp=3_600_000
    )
    ArchiveSegment.objects.create(
        start_timestamp=0, end_timestamp=3_600_000, uri="file:///a", rows={"commit_log": 3}
    )

    answer = owner.get(URL, {"msg_id": "LONG-GONE"}).json()

    assert answer["messages"] == []
    assert answer["archive"] == {
        "pruned_until_timestamp": 3_600_000,
        "segment_count": 1,
        "segments": [
            {
                "start_timestamp": 0,
                "end_timestamp": 3_600_000,
                "uri": "file:///a",
                "rows": {"commit_log": 3},
            }
        ],
    }


def test_a_messages_deliveries_per_consumer_group(owner, sent):
    mine, _ = sent
    got = messages_receive(
        consumer_group="C", topic="TranTest", max_messages=32, invisible_duration_ms=60_000
    )
    target = next(r for r in got if r.message.pk == mine[0].pk)
    messages_ack(consumer_group="C", receipt_handles=[target.receipt_handle])

    answer = owner.get(f"/api/v1/messages/{mine[0].msg_id}/deliveries")

    assert answer.status_code == 200
    body = answer.json()
    assert body["commit_log_offset"] == mine[0].commit_log_offset
    assert body["deliveries"] == [
        {
            "consumer_group": "C",
            "state": "acked",
            "deliveries": 1,
            "first_delivered_timestamp": body["deliveries"][0]["first_delivered_timestamp"],
            "last_event": "acked",
            "last_event_timestamp": body["deliveries"][0]["last_event_timestamp"],
            "invisible_until_timestamp": None,
        }
    ]
    assert_error(owner.get("/api/v1/messages/NOPE/deliveries"), 404, "message_not_found")

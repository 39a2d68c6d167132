"""api-v1 topics' ``message_type`` (an addition: RocketMQ 5's ``message.type``): created MIXED
without it, set at creation and by PATCH, in the OpenAPI document; a send of a type the topic
does not accept is 400 ``message_type_mismatch`` in the contract's error body, nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import Message, ScheduledMessage, Transaction
from broker.rules.clock import now_ms
from broker.services.topology.writes import topic_create
from tests.api_helpers import assert_error, post, send_half, send_message

HOUR = 3_600_000


def patch(client, url: str, data) -> Any:
    return client.patch(url, data, format="json")


@pytest.fixture
def document(anonymous) -> dict[str, Any]:
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def _stored() -> tuple[int, int, int]:
    return Message.objects.count(), ScheduledMessage.objects.count(), Transaction.objects.count()


def test_a_topic_created_without_a_type_is_mixed_and_says_so(owner):
    response = post(owner, "/api/v1/topics", {"name": "Plain", "queue_nums": 2})

    assert response.status_code == 201
    assert response.json()["message_type"] == "MIXED"
    listed = owner.get("/api/v1/topics").json()
    assert [t["message_type"] for t in listed] == ["MIXED"]
    assert owner.get("/api/v1/topics/Plain").json()["message_type"] == "MIXED"


@pytest.mark.parametrize("message_type", ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"])
def test_a_topic_is_created_with_its_type(owner, message_type):
    response = post(owner, "/api/v1/topics", {"name": "Typed", "message_type": message_type})

    assert response.status_code == 201
    assert response.json() == {
        "name": "Typed",
        "queue_nums": 4,
        "message_type": message_type,
        "created_timestamp": response.json()["created_timestamp"],
    }


@pytest.mark.parametrize("bad", ["PRIORITY", "normal", "", 3, None])
def test_an_unknown_type_is_refused_and_nothing_created(owner, bad):
    response = post(owner, "/api/v1/topics", {"name": "Typed", "message_type": bad})

    error = assert_error(response, 400, "invalid_input")
    assert "message_type" in error["details"]["fields"]
    assert owner.get("/api/v1/topics/Typed").status_code == 404


def test_patch_changes_the_type_of_a_topic_holding_messages(owner, producer, topic):
    assert send_message(producer).status_code == 201

    response = patch(owner, "/api/v1/topics/TranTest", {"message_type": "TRANSACTION"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["message_type"], body["queue_nums"]) == ("TRANSACTION", 4)
    assert sum(q["max_offset"] for q in body["queues"]) == 1  # the stored message stays
    assert_error(send_message(producer), 400, "message_type_mismatch")


def test_patch_takes_queues_and_type_together_but_not_nothing(owner, topic):
    response = patch(owner, "/api/v1/topics/TranTest", {"queue_nums": 6, "message_type": "DELAY"})

    assert response.status_code == 200
    assert (response.json()["queue_nums"], response.json()["message_type"]) == (6, "DELAY")
    assert_error(patch(owner, "/api/v1/topics/TranTest", {}), 400, "invalid_input")
    error = assert_error(
        patch(owner, "/api/v1/topics/TranTest", {"message_type": "LITE"}), 400, "invalid_input"
    )
    assert "message_type" in error["details"]["fields"]
    assert owner.get("/api/v1/topics/TranTest").json()["message_type"] == "DELAY"


def test_a_normal_message_on_a_transaction_topic_is_refused_with_the_contracts_body(producer, db):
    topic_create(name="TranTest", queue_nums=4, message_type="TRANSACTION")
    before = _stored()

    error = assert_error(send_message(producer), 400, "message_type_mismatch")

    assert error["details"] == {
        "topic": "TranTest",
        "topic_message_type": "TRANSACTION",
        "message_type": "NORMAL",
        "accepted_message_types": ["TRANSACTION"],
    }
    assert "accepts TRANSACTION messages, not a NORMAL message" in error["message"]
    assert _stored() == before


@pytest.mark.parametrize("timing", [{"deliver_at": 1}, {"delay_level": 1}])
def test_a_delay_message_on_a_normal_topic_is_refused_due_or_not(producer, db, timing):
    topic_create(name="TranTest", queue_nums=4, message_type="NORMAL")
    before = _stored()

    error = assert_error(send_message(producer, **timing), 400, "message_type_mismatch")

    assert error["details"]["message_type"] == "DELAY"
    assert _stored() == before


def test_a_delay_topic_takes_delay_messages_only(producer, db):
    topic_create(name="TranTest", queue_nums=4, message_type="DELAY")

    assert send_message(producer, deliver_at=now_ms() + HOUR).status_code == 201
    assert_error(send_message(producer), 400, "message_type_mismatch")


def test_a_half_message_on_a_normal_topic_is_refused(producer, producer_group, db):
    topic_create(name="TranTest", queue_nums=4, message_type="NORMAL")
    before = _stored()

    error = assert_error(send_half(producer), 400, "message_type_mismatch")

    assert error["details"]["message_type"] == "TRANSACTION"
    assert _stored() == before


def test_a_message_batch_refuses_each_item_of_another_type_alone(producer, db):
    topic_create(name="TranTest", queue_nums=4, message_type="NORMAL")

    response = post(
        producer,
        "/api/v1/messages/batch",
        {
            "messages": [
                {"topic": "TranTest", "body": "a"},
                {"topic": "TranTest", "body": "b", "delay_level": 2},
            ]
        },
    )

    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results[0]["status"] == 201
    assert (results[1]["status"], results[1]["error"]["code"]) == (400, "message_type_mismatch")
    assert ScheduledMessage.objects.count() == 0


def test_the_schema_states_message_type_where_topics_are_written_and_read(document):
    schemas = document["components"]["schemas"]
    types = ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"]
    assert schemas["TopicMessageTypeEnum"]["enum"] == types
    enum_ref = {"$ref": "#/components/schemas/TopicMessageTypeEnum"}
    create = schemas["TopicInRequest"]
    assert create["properties"]["message_type"]["allOf"] == [enum_ref]
    assert create["properties"]["message_type"]["default"] == "MIXED"
    assert "message_type" not in create.get("required", [])
    body = document["paths"]["/api/v1/topics/{name}"]["patch"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"]
    patch_schema = schemas[ref.rsplit("/", 1)[1]]
    assert set(patch_schema["properties"]) == {"queue_nums", "message_type"}
    assert patch_schema["properties"]["message_type"]["allOf"] == [enum_ref]
    assert patch_schema.get("required", []) == []
    assert patch_schema["anyOf"] == [{"required": ["queue_nums"]}, {"required": ["message_type"]}]
    assert "message_type" in schemas["TopicOut"]["properties"]
    assert "message_type" in schemas["TopicDetailOut"]["properties"]
    for path in ("/api/v1/messages", "/api/v1/transactions"):
        assert "message_type_mismatch" in document["paths"][path]["post"]["description"]

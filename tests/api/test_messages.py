"""api-v1 Normal messages: send, view by msg_id, query by key; body forms and limits."""

from __future__ import annotations

import base64
import time

import pytest

from broker.models import Message
from tests.api_helpers import assert_error, post, receive, send_message

SYSTEM_TOPICS = [
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "%RETRY%x",
    "%DLQ%x",
]


# --- Send ----------------------------------------------------------------------------------------


def test_a_producer_sends_a_normal_message(producer, topic):
    response = send_message(producer, tags="TagA", keys="order-1", body="hello")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {
        "status",
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
    }
    assert body["status"] == "SEND_OK"
    assert body["topic"] == "TranTest"
    assert 0 <= body["queue_id"] < 4
    assert body["queue_offset"] == 0
    assert isinstance(body["commit_log_offset"], int)
    assert isinstance(body["msg_id"], str) and body["msg_id"]
    stored = Message.objects.get(pk=body["commit_log_offset"])
    assert (stored.msg_id, stored.topic, stored.queue_id) == (
        body["msg_id"],
        "TranTest",
        body["queue_id"],
    )


def test_every_message_gets_its_own_msg_id_and_a_growing_commit_log_offset(producer, topic):
    sent = [send_message(producer).json() for _ in range(5)]

    assert len({m["msg_id"] for m in sent}) == 5
    offsets = [m["commit_log_offset"] for m in sent]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5


def test_a_sent_message_is_visible_to_consumers_at_once(producer, consumer, topic, consumer_group):
    msg_id = send_message(producer, body="now").json()["msg_id"]

    messages = receive(consumer).json()["messages"]

    assert [(m["msg_id"], m["body"]) for m in messages] == [(msg_id, "now")]


def test_a_text_body_is_stored_as_utf8(owner, topic):
    msg_id = send_message(owner, body="héllo ☾").json()["msg_id"]

    shown = owner.get(f"/api/v1/messages/{msg_id}").json()

    assert shown["body"] == "héllo ☾"
    assert "body_base64" not in shown
    assert bytes(Message.objects.get(msg_id=msg_id).body) == "héllo ☾".encode()


def test_a_binary_body_round_trips_as_base64(owner, topic):
    raw = bytes(range(256)) + b"\x00\xff\xfe"
    encoded = base64.b64encode(raw).decode()

    msg_id = send_message(owner, body_base64=encoded).json()["msg_id"]
    shown = owner.get(f"/api/v1/messages/{msg_id}").json()

    assert shown["body_base64"] == encoded
    assert "body" not in shown
    assert base64.b64decode(shown["body_base64"]) == raw


def test_an_empty_body_is_a_body(owner, topic):
    assert send_message(owner, body="").status_code == 201
    assert send_message(owner, body_base64="").status_code == 201


@pytest.mark.parametrize(
    "bodies",
    [{"body": "x", "body_base64": "eA=="}, {}],
    ids=["both", "neither"],
)
def test_a_message_has_exactly_one_of_body_or_body_base64(owner, topic, bodies):
    response = post(owner, "/api/v1/messages", {"topic": "TranTest", **bodies})

    error = assert_error(response, 400, "invalid_input")
    assert "body" in error["details"]["fields"]


@pytest.mark.parametrize("encoded", ["not base64!", "eA=", "e", "eA==eA=="])
def test_invalid_base64_is_refused(owner, topic, encoded):
    response = send_message(owner, body_base64=encoded)

    error = assert_error(response, 400, "invalid_input")
    assert "body_base64" in error["details"]["fields"]


def test_a_body_at_the_limit_is_accepted_and_one_byte_more_is_too_large(
    owner, topic, broker_settings
):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 10

    assert send_message(owner, body="x" * 10).status_code == 201
    error = assert_error(send_message(owner, body="x" * 11), 413, "message_too_large")
    assert error["details"] == {"size": 11, "limit": 10}


def test_the_body_limit_counts_utf8_bytes_not_characters(owner, topic, broker_settings):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 10

    assert_error(send_message(owner, body="é" * 6), 413, "message_too_large")


def test_the_body_limit_counts_decoded_bytes_of_base64(owner, topic, broker_settings):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 10
    ten = base64.b64encode(b"\x01" * 10).decode()  # 16 characters of base64
    eleven = base64.b64encode(b"\x01" * 11).decode()

    assert send_message(owner, body_base64=ten).status_code == 201
    assert_error(send_message(owner, body_base64=eleven), 413, "message_too_large")


def test_a_body_of_4_mib_plus_one_byte_is_too_large_by_default(owner, topic):
    four_mib = 4 * 1024 * 1024

    response = send_message(owner, body="x" * (four_mib + 1))

    error = assert_error(response, 413, "message_too_large")
    assert error["details"] == {"size": four_mib + 1, "limit": four_mib}
    assert not Message.objects.filter(topic="TranTest").exists()


def test_a_request_larger_than_the_upload_limit_is_refused_before_parsing(owner, topic, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = send_message(owner, body="x" * 2000)

    assert_error(response, 413, "request_too_large")


def test_properties_are_kept(owner, topic):
    msg_id = send_message(owner, properties={"trace": "abc", "empty": ""}).json()["msg_id"]

    shown = owner.get(f"/api/v1/messages/{msg_id}").json()

    assert shown["properties"]["trace"] == "abc"
    assert shown["properties"]["empty"] == ""


def test_properties_at_32_kib_are_accepted_and_beyond_are_too_large(owner, topic):
    limit = 32 * 1024

    assert send_message(owner, properties={"k": "v" * (limit - 1)}).status_code == 201
    error = assert_error(
        send_message(owner, properties={"k": "v" * limit}), 413, "properties_too_large"
    )
    assert error["details"] == {"size": limit + 1, "limit": limit}


def test_the_properties_limit_is_configurable(owner, topic, broker_settings):
    broker_settings["HALFMOON_MAX_PROPERTIES_SIZE"] = 8

    assert send_message(owner, properties={"ab": "cdefgh"}).status_code == 201
    assert_error(send_message(owner, properties={"ab": "cdefghi"}), 413, "properties_too_large")


@pytest.mark.parametrize(
    "name",
    ["REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "UNIQ_KEY", "TRANSACTION_CHECK_TIMES", "KEYS"],
)
def test_a_property_the_broker_owns_is_refused(owner, topic, name):
    response = send_message(owner, properties={name: "x"})

    error = assert_error(response, 400, "reserved_property")
    assert error["details"] == {"properties": [name]}


@pytest.mark.parametrize("properties", [["a"], "a=b", {"a": {"b": "c"}}, {"a": None}, {"": "x"}])
def test_properties_must_map_strings_to_strings(owner, topic, properties):
    response = send_message(owner, properties=properties)

    assert_error(response, 400)


@pytest.mark.parametrize("name", SYSTEM_TOPICS)
def test_a_producer_may_not_send_to_a_system_topic(owner, producer, topic, producer_group, name):
    post(owner, "/api/v1/transactions", {"producer_group": "G", "topic": "TranTest", "body": "x"})
    stored = Message.objects.filter(topic=name).count()

    for client in (producer, owner):
        error = assert_error(send_message(client, topic=name), 403, "system_topic")
        assert name in error["message"]
    assert Message.objects.filter(topic=name).count() == stored


def test_sending_to_an_unknown_topic_is_not_found(owner):
    error = assert_error(send_message(owner, topic="Nope"), 404, "topic_not_found")

    assert error["details"] == {"topic": "Nope"}


@pytest.mark.parametrize(
    "data",
    [{"body": "x"}, {"topic": "bad topic", "body": "x"}, {"topic": ["TranTest"], "body": "x"}],
)
def test_a_message_without_a_valid_topic_is_invalid(owner, topic, data):
    assert_error(post(owner, "/api/v1/messages", data), 400, "invalid_input")


# --- View by msg_id ------------------------------------------------------------------------------


def test_the_owner_views_a_stored_message(owner, topic):
    before = int(time.time() * 1000)
    sent = send_message(owner, tags="TagA", keys="k1 k2", body="hi", properties={"p": "1"}).json()

    response = owner.get(f"/api/v1/messages/{sent['msg_id']}")

    assert response.status_code == 200
    shown = response.json()
    for field in ("msg_id", "topic", "queue_id", "queue_offset", "commit_log_offset"):
        assert shown[field] == sent[field]
    assert shown["tags"] == "TagA"
    assert shown["keys"] == "k1 k2"
    assert shown["body"] == "hi"
    assert shown["properties"]["p"] == "1"
    assert before <= shown["born_timestamp"] <= shown["store_timestamp"] <= int(time.time() * 1000)


def test_a_producer_views_the_message_it_sent(producer, topic):
    msg_id = send_message(producer, body="mine").json()["msg_id"]

    response = producer.get(f"/api/v1/messages/{msg_id}")

    assert response.status_code == 200
    assert response.json()["body"] == "mine"
    assert response.json()["producer_group"] == "G"


def test_a_half_message_is_viewable_by_msg_id_whatever_its_topic(owner, topic, producer_group):
    transaction_id = post(
        owner, "/api/v1/transactions", {"producer_group": "G", "topic": "TranTest", "body": "half"}
    ).json()["transaction_id"]

    prepared = owner.get(f"/api/v1/messages/{transaction_id}").json()
    post(
        owner,
        f"/api/v1/transactions/{transaction_id}/end",
        {"producer_group": "G", "action": "commit"},
    )
    committed = owner.get(f"/api/v1/messages/{transaction_id}").json()

    assert (prepared["topic"], prepared["body"]) == ("RMQ_SYS_TRANS_HALF_TOPIC", "half")
    assert prepared["properties"]["REAL_TOPIC"] == "TranTest"
    assert (committed["topic"], committed["body"]) == ("TranTest", "half")
    assert committed["msg_id"] == transaction_id


def test_an_unknown_msg_id_is_not_found(owner, producer):
    assert_error(owner.get("/api/v1/messages/0123456789ABCDEF"), 404, "message_not_found")
    assert_error(producer.get("/api/v1/messages/0123456789ABCDEF"), 404, "message_not_found")


# --- Query by key --------------------------------------------------------------------------------


def test_messages_are_found_by_any_of_their_space_separated_keys(owner, topic):
    first = send_message(owner, keys="order-1 customer-7").json()["msg_id"]
    second = send_message(owner, keys="customer-7").json()["msg_id"]
    third = send_message(owner, keys="order-2 customer-7 region-eu").json()["msg_id"]
    send_message(owner, keys="customer-70 xcustomer-7")

    def found(key: str) -> list[str]:
        response = owner.get(f"/api/v1/messages?topic=TranTest&key={key}")
        assert response.status_code == 200
        return [m["msg_id"] for m in response.json()]

    assert found("customer-7") == [first, second, third]
    assert found("order-1") == [first]
    assert found("region-eu") == [third]
    assert found("order") == []
    assert found("customer") == []


def test_a_key_query_is_limited_to_its_topic(owner, topic):
    post(owner, "/api/v1/topics", {"name": "Other", "queue_nums": 1})
    send_message(owner, topic="Other", keys="k")
    here = send_message(owner, keys="k").json()["msg_id"]

    found = owner.get("/api/v1/messages?topic=TranTest&key=k").json()

    assert [m["msg_id"] for m in found] == [here]
    assert found[0]["topic"] == "TranTest"


def test_a_key_query_on_an_unknown_topic_finds_nothing(owner):
    response = owner.get("/api/v1/messages?topic=Nope&key=k")

    assert response.status_code == 200
    assert response.json() == []


@pytest.mark.parametrize("query", ["", "?topic=TranTest", "?key=k", "?topic=bad%20name&key=k"])
def test_a_key_query_needs_a_topic_and_a_key(owner, topic, query):
    assert_error(owner.get(f"/api/v1/messages{query}"), 400, "invalid_input")


def test_a_normal_send_naming_an_unknown_producer_group_is_404(owner, topic):
    response = owner.post(
        "/api/v1/messages",
        {"topic": "TranTest", "body": "x", "producer_group": "Nobody"},
        format="json",
    )
    assert_error(response, 404, "producer_group_not_found")

"""api-v1 Topics and groups (admin key): topics, producer groups, consumer groups."""

from __future__ import annotations

import time

import pytest

from broker.models import ProducerGroup
from tests.api_helpers import assert_error, end, post, send_half, send_message

# --- Topics --------------------------------------------------------------------------------------


def test_the_owner_creates_a_topic(owner):
    before = int(time.time() * 1000)

    response = post(owner, "/api/v1/topics", {"name": "TranTest", "queue_nums": 4})

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"name", "queue_nums", "message_type", "created_timestamp"}
    assert body["name"] == "TranTest"
    assert body["queue_nums"] == 4
    assert isinstance(body["created_timestamp"], int)
    assert before <= body["created_timestamp"] <= int(time.time() * 1000)


def test_a_topic_without_queue_nums_gets_four_queues(owner):
    response = post(owner, "/api/v1/topics", {"name": "Defaulted"})

    assert response.status_code == 201
    assert response.json()["queue_nums"] == 4


def test_creating_a_topic_that_exists_is_a_conflict(owner, topic):
    response = post(owner, "/api/v1/topics", {"name": "TranTest", "queue_nums": 8})

    error = assert_error(response, 409, "topic_exists")
    assert error["details"] == {"name": "TranTest"}


@pytest.mark.parametrize(
    "name",
    ["", "a" * 128, "with space", "dot.ted", "slash/ed", "ünïcode", "semi;colon", "star*"],
)
def test_a_topic_name_outside_the_rocketmq_pattern_is_invalid(owner, name):
    response = post(owner, "/api/v1/topics", {"name": name, "queue_nums": 1})

    error = assert_error(response, 400, "invalid_input")
    assert "name" in error["details"]["fields"]


def test_a_bad_name_is_explained_with_the_pattern(owner):
    response = post(owner, "/api/v1/topics", {"name": "with space", "queue_nums": 1})

    error = assert_error(response, 400, "invalid_input")
    assert error["details"]["fields"]["name"] == ["Must match ^[%|a-zA-Z0-9_-]{1,127}$."]


@pytest.mark.parametrize("name", ["a" * 127, "%|a-Z_0", "|", "%"])
def test_every_name_the_rocketmq_pattern_allows_is_accepted(owner, name):
    assert post(owner, "/api/v1/topics", {"name": name, "queue_nums": 1}).status_code == 201


@pytest.mark.parametrize(
    "name",
    [
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "RMQ_SYS_ANYTHING",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "%RETRY%C",
        "%DLQ%C",
    ],
)
def test_a_system_topic_name_may_not_be_created(owner, name):
    response = post(owner, "/api/v1/topics", {"name": name, "queue_nums": 1})

    assert_error(response, 400, "system_topic")


@pytest.mark.parametrize("queue_nums", [0, -1, 1025, "four", None])
def test_queue_nums_outside_1_to_1024_is_invalid(owner, queue_nums):
    response = post(owner, "/api/v1/topics", {"name": "Bad", "queue_nums": queue_nums})

    error = assert_error(response, 400, "invalid_input")
    assert "queue_nums" in error["details"]["fields"]


def test_the_owner_lists_user_topics_but_not_system_ones(owner, topic, producer_group):
    post(owner, "/api/v1/topics", {"name": "Another", "queue_nums": 1})
    send_half(owner)  # creates RMQ_SYS_TRANS_HALF_TOPIC

    response = owner.get("/api/v1/topics")

    assert response.status_code == 200
    assert [t["name"] for t in response.json()] == ["Another", "TranTest"]
    assert set(response.json()[0]) == {"name", "queue_nums", "message_type", "created_timestamp"}


def test_a_new_topic_shows_every_queue_empty(owner, topic):
    response = owner.get("/api/v1/topics/TranTest")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"name", "queue_nums", "message_type", "created_timestamp", "queues"}
    assert body["queues"] == [{"queue_id": q, "min_offset": 0, "max_offset": 0} for q in range(4)]


def test_a_topics_queue_offsets_move_as_messages_are_sent(owner, topic):
    sent = [send_message(owner).json() for _ in range(10)]

    queues = owner.get("/api/v1/topics/TranTest").json()["queues"]

    per_queue = {q: sum(1 for m in sent if m["queue_id"] == q) for q in range(4)}
    assert [q["queue_id"] for q in queues] == [0, 1, 2, 3]
    for queue in queues:
        assert queue["min_offset"] == 0
        assert queue["max_offset"] == per_queue[queue["queue_id"]]
    assert sum(q["max_offset"] for q in queues) == 10


def test_a_half_message_moves_a_topics_offsets_only_once_committed(owner, topic, producer_group):
    transaction_id = send_half(owner).json()["transaction_id"]

    assert sum(q["max_offset"] for q in owner.get("/api/v1/topics/TranTest").json()["queues"]) == 0

    committed = end(owner, transaction_id, "commit").json()
    queues = owner.get("/api/v1/topics/TranTest").json()["queues"]
    assert queues[committed["queue_id"]]["max_offset"] == committed["queue_offset"] + 1
    assert sum(q["max_offset"] for q in queues) == 1


def test_an_unknown_topic_is_not_found(owner):
    error = assert_error(owner.get("/api/v1/topics/Nope"), 404, "topic_not_found")

    assert error["details"] == {"topic": "Nope"}


# --- Producer groups -----------------------------------------------------------------------------


def test_the_owner_creates_a_producer_group_and_sees_its_secret_once(owner):
    response = post(
        owner, "/api/v1/producer-groups", {"name": "G", "check_url": "http://127.0.0.1:9000/check"}
    )

    assert response.status_code == 201
    body = response.json()
    assert {"name", "check_url", "check_secret"} <= set(body)
    assert body["name"] == "G"
    assert body["check_url"] == "http://127.0.0.1:9000/check"
    assert isinstance(body["check_secret"], str) and len(body["check_secret"]) >= 32
    assert ProducerGroup.objects.get(name="G").check_secret == body["check_secret"]

    detail = owner.get("/api/v1/producer-groups/G").json()
    listed = owner.get("/api/v1/producer-groups").json()
    assert "check_secret" not in detail
    assert all("check_secret" not in g for g in listed)
    assert body["check_secret"] not in owner.get("/api/v1/producer-groups/G").content.decode()
    assert body["check_secret"] not in owner.get("/api/v1/producer-groups").content.decode()


def test_every_producer_group_gets_its_own_secret(owner):
    first = post(owner, "/api/v1/producer-groups", {"name": "G1"}).json()
    second = post(owner, "/api/v1/producer-groups", {"name": "G2"}).json()

    assert first["check_secret"] != second["check_secret"]


@pytest.mark.parametrize("data", [{"name": "G", "check_url": None}, {"name": "G"}])
def test_a_producer_group_without_check_url_polls(owner, data):
    response = post(owner, "/api/v1/producer-groups", data)

    assert response.status_code == 201
    assert response.json()["check_url"] is None


def test_creating_a_producer_group_that_exists_is_a_conflict(owner, producer_group):
    response = post(owner, "/api/v1/producer-groups", {"name": "G", "check_url": None})

    assert_error(response, 409, "producer_group_exists")


@pytest.mark.parametrize(
    "data",
    [
        {"name": "bad name"},
        {"name": "a" * 128},
        {"name": "G", "check_url": "not a url"},
        {"check_url": None},
    ],
)
def test_an_invalid_producer_group_is_refused(owner, data):
    assert_error(post(owner, "/api/v1/producer-groups", data), 400, "invalid_input")


def test_the_owner_lists_and_reads_producer_groups(owner, producer_group):
    listed = owner.get("/api/v1/producer-groups")
    detail = owner.get("/api/v1/producer-groups/G")

    assert listed.status_code == 200
    assert [g["name"] for g in listed.json()] == ["G"]
    assert detail.status_code == 200
    assert detail.json()["name"] == "G"
    assert detail.json()["check_url"] is None


def test_an_unknown_producer_group_is_not_found(owner):
    assert_error(owner.get("/api/v1/producer-groups/Nope"), 404, "producer_group_not_found")
    assert_error(
        owner.patch("/api/v1/producer-groups/Nope", {"check_url": None}, format="json"),
        404,
        "producer_group_not_found",
    )


def test_patch_changes_a_producer_groups_check_url(owner, producer_group):
    url = "http://127.0.0.1:9000/check"

    response = owner.patch("/api/v1/producer-groups/G", {"check_url": url}, format="json")

    assert response.status_code == 200
    assert response.json()["check_url"] == url
    assert "check_secret" not in response.json()
    assert owner.get("/api/v1/producer-groups/G").json()["check_url"] == url

    back = owner.patch("/api/v1/producer-groups/G", {"check_url": None}, format="json")
    assert back.status_code == 200
    assert back.json()["check_url"] is None


def test_patch_keeps_a_producer_groups_secret(owner, producer_group):
    secret = producer_group.check_secret

    owner.patch("/api/v1/producer-groups/G", {"check_url": "http://127.0.0.1:9/x"}, format="json")

    assert ProducerGroup.objects.get(name="G").check_secret == secret


@pytest.mark.parametrize("data", [{"check_url": "nope"}, {}])
def test_patch_with_an_invalid_check_url_is_refused(owner, producer_group, data):
    response = owner.patch("/api/v1/producer-groups/G", data, format="json")

    error = assert_error(response, 400, "invalid_input")
    assert "check_url" in error["details"]["fields"]


# --- Consumer groups -----------------------------------------------------------------------------


def test_the_owner_creates_a_consumer_group(owner):
    response = post(owner, "/api/v1/consumer-groups", {"name": "C", "max_delivery_attempts": 5})

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "C"
    assert body["max_delivery_attempts"] == 5
    assert isinstance(body["created_timestamp"], int)


def test_a_consumer_group_gets_rocketmqs_sixteen_attempts_by_default(owner):
    response = post(owner, "/api/v1/consumer-groups", {"name": "C"})

    assert response.status_code == 201
    assert response.json()["max_delivery_attempts"] == 16


def test_creating_a_consumer_group_that_exists_is_a_conflict(owner, consumer_group):
    response = post(owner, "/api/v1/consumer-groups", {"name": "C"})

    assert_error(response, 409, "consumer_group_exists")


@pytest.mark.parametrize(
    "data", [{"name": "bad name"}, {"name": "C", "max_delivery_attempts": 0}, {}]
)
def test_an_invalid_consumer_group_is_refused(owner, data):
    assert_error(post(owner, "/api/v1/consumer-groups", data), 400, "invalid_input")


def test_the_owner_lists_consumer_groups(owner, consumer_group):
    response = owner.get("/api/v1/consumer-groups")

    assert response.status_code == 200
    assert response.json() == [
        {
            "name": "C",
            "max_delivery_attempts": 3,
            "created_timestamp": consumer_group.created_timestamp,
        }
    ]


@pytest.mark.parametrize("name", ["CID_RMQ_SYS_TRANS", "RMQ_SYS_X", "PID_RMQ_SYS_Y"])
def test_the_brokers_own_group_names_are_refused(owner, name):
    for path in ("/api/v1/consumer-groups", "/api/v1/producer-groups"):
        response = owner.post(path, {"name": name}, format="json")
        assert_error(response, 400, "reserved_group")

"""api-v1 Transactions: half messages, end (commit, rollback, unknown), reads, lists, and the
check-requests poll of a producer group without check_url."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from broker.models import Message, Resolution, Transaction
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.resolution import transaction_discard
from tests.api_helpers import assert_error, end, key_client, post, receive, send_half

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


def delivered(topic: str = "TranTest") -> int:
    """Messages stored on the real topic (what consumers may receive)."""
    return Message.objects.filter(topic=topic).count()


def discard(transaction_id: str) -> None:
    """Make a PREPARED transaction DISCARDED as the check scan does past the check maximum."""
    with transaction.atomic():
        tx = Transaction.objects.select_for_update().get(pk=transaction_id)
        transaction_discard(tx, reason="check_max")


# --- Half messages -------------------------------------------------------------------------------


def test_a_producer_sends_a_half_message(producer, topic, producer_group):
    response = send_half(producer, tags="TagA", keys="order-42")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == {
        "status",
        "transaction_id",
        "msg_id",
        "commit_log_offset",
        "half_queue_offset",
        "state",
    }
    assert body["status"] == "SEND_OK"
    assert body["state"] == "PREPARED"
    assert body["transaction_id"] == body["msg_id"]
    assert isinstance(body["commit_log_offset"], int)
    assert body["half_queue_offset"] == 0
    half = Message.objects.get(pk=body["commit_log_offset"])
    assert half.topic == HALF_TOPIC
    assert half.msg_id == body["msg_id"]
    assert half.queue_offset == body["half_queue_offset"]


def test_a_half_message_is_invisible_to_every_consumer(
    owner, producer, consumer, topic, producer_group, consumer_group
):
    send_half(producer)
    post(owner, "/api/v1/consumer-groups", {"name": "D"})

    assert receive(consumer).json() == {"messages": []}
    assert receive(owner, group="D").json() == {"messages": []}
    assert delivered() == 0


def test_a_producer_may_choose_its_own_msg_id(producer, topic, producer_group):
    response = send_half(producer, msg_id="order-42-tx")

    assert response.status_code == 201
    assert response.json()["transaction_id"] == "order-42-tx"
    assert response.json()["msg_id"] == "order-42-tx"


def test_the_same_msg_id_again_for_the_same_group_answers_the_stored_transaction(
    producer, topic, producer_group
):
    first = send_half(producer, msg_id="order-42-tx", body="first")
    stored = Message.objects.count()

    again = send_half(producer, msg_id="order-42-tx", body="second")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == first.json()
    assert Message.objects.count() == stored
    assert Transaction.objects.count() == 1


def test_the_same_msg_id_again_after_commit_answers_the_committed_transaction(
    producer, topic, producer_group
):
    send_half(producer, msg_id="order-42-tx")
    end(producer, "order-42-tx", "commit")
    stored = Message.objects.count()

    again = send_half(producer, msg_id="order-42-tx")

    assert again.status_code == 200
    assert again.json()["state"] == "COMMITTED"
    assert Message.objects.count() == stored
    assert delivered() == 1


def test_the_same_msg_id_from_another_group_is_a_conflict(owner, topic, producer_group):
    producer_group_create(name="H", check_url=None)
    send_half(owner, producer_group="G", msg_id="shared-id")
    stored = Message.objects.count()

    response = send_half(owner, producer_group="H", msg_id="shared-id")

    error = assert_error(response, 409, "duplicate_msg_id")
    assert error["details"] == {"msg_id": "shared-id"}
    assert Message.objects.count() == stored
    assert Transaction.objects.get(pk="shared-id").producer_group == "G"


@pytest.mark.parametrize("msg_id", ["has space", "a" * 65, "slash/ed", ""])
def test_an_invalid_msg_id_is_refused(producer, topic, producer_group, msg_id):
    error = assert_error(send_half(producer, msg_id=msg_id), 400, "invalid_input")

    assert "msg_id" in error["details"]["fields"]


def test_check_immunity_above_an_hour_is_refused(producer, topic, producer_group):
    error = assert_error(
        send_half(producer, check_immunity_seconds=3601), 400, "invalid_check_immunity"
    )

    assert error["details"] == {"check_immunity_seconds": 3601}
    assert not Transaction.objects.exists()


def test_negative_check_immunity_is_refused(producer, topic, producer_group):
    assert_error(send_half(producer, check_immunity_seconds=-1), 400)


def test_check_immunity_of_an_hour_delays_the_first_check_by_an_hour(
    producer, topic, producer_group
):
    transaction_id = send_half(producer, check_immunity_seconds=3600).json()["transaction_id"]

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()

    assert tx["next_check_timestamp"] - tx["born_timestamp"] == 3_600_000


def test_check_immunity_below_the_transaction_timeout_is_raised_to_it(
    producer, topic, producer_group
):
    transaction_id = send_half(producer, check_immunity_seconds=1).json()["transaction_id"]

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()

    assert tx["next_check_timestamp"] - tx["born_timestamp"] == 6000


def test_without_check_immunity_the_first_check_waits_the_transaction_timeout(
    producer, topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 2500
    transaction_id = send_half(producer).json()["transaction_id"]

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()

    assert tx["next_check_timestamp"] - tx["born_timestamp"] == 2500


def test_a_half_message_for_an_unknown_producer_group_is_not_found(owner, topic):
    error = assert_error(send_half(owner, producer_group="Nope"), 404, "producer_group_not_found")

    assert error["details"] == {"producer_group": "Nope"}


def test_a_half_message_for_an_unknown_topic_is_not_found(owner, producer_group):
    assert_error(send_half(owner, topic="Nope"), 404, "topic_not_found")


@pytest.mark.parametrize(
    "name", ["RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "%RETRY%x", "%DLQ%x"]
)
def test_a_half_message_may_not_go_to_a_system_topic(producer, producer_group, name):
    assert_error(send_half(producer, topic=name), 403, "system_topic")


def test_a_half_message_obeys_the_body_and_properties_limits(
    producer, topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 4
    broker_settings["HALFMOON_MAX_PROPERTIES_SIZE"] = 4

    assert_error(send_half(producer, body="12345"), 413, "message_too_large")
    assert_error(
        send_half(producer, body="1", properties={"ab": "cde"}), 413, "properties_too_large"
    )
    assert_error(
        send_half(producer, body="1", properties={"REAL_TOPIC": "x"}), 400, "reserved_property"
    )
    assert not Transaction.objects.exists()


@pytest.mark.parametrize(
    "bodies",
    [{"body": "x", "body_base64": "eA=="}, {"body_base64": "%%%"}],
    ids=["both", "bad-base64"],
)
def test_a_half_message_body_must_be_one_valid_form(producer, topic, producer_group, bodies):
    response = post(
        producer, "/api/v1/transactions", {"producer_group": "G", "topic": "TranTest", **bodies}
    )

    assert_error(response, 400, "invalid_input")


def test_a_half_message_without_a_producer_group_is_invalid(owner, topic):
    response = post(owner, "/api/v1/transactions", {"topic": "TranTest", "body": "x"})

    error = assert_error(response, 400, "invalid_input")
    assert "producer_group" in error["details"]["fields"]


# --- End: commit ---------------------------------------------------------------------------------


def test_commit_makes_the_message_receivable_with_the_same_msg_id(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer, tags="TagA", keys="order-42", body="paid").json()[
        "transaction_id"
    ]

    response = end(producer, transaction_id, "commit")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"transaction_id", "state", "msg_id", "topic", "queue_id", "queue_offset"}
    assert body["transaction_id"] == transaction_id
    assert body["state"] == "COMMITTED"
    assert body["msg_id"] == transaction_id
    assert body["topic"] == "TranTest"
    assert 0 <= body["queue_id"] < 4
    assert body["queue_offset"] == 0
    messages = receive(consumer).json()["messages"]
    assert len(messages) == 1
    message = messages[0]
    assert message["msg_id"] == transaction_id
    assert (message["topic"], message["queue_id"], message["queue_offset"]) == (
        "TranTest",
        body["queue_id"],
        body["queue_offset"],
    )
    assert (message["tags"], message["keys"], message["body"]) == ("TagA", "order-42", "paid")


def test_a_committed_binary_body_is_received_unchanged(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer, body_base64="AAEC/w==").json()["transaction_id"]

    end(producer, transaction_id, "commit")

    message = receive(consumer).json()["messages"][0]
    assert message["body_base64"] == "AAEC/w=="
    assert "body" not in message


def test_commit_keeps_user_properties_but_not_the_half_message_ones(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer, properties={"trace": "t-1"}).json()["transaction_id"]

    end(producer, transaction_id, "commit")

    properties = receive(consumer).json()["messages"][0]["properties"]
    assert properties["trace"] == "t-1"
    assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(properties)


def test_commit_again_answers_the_same_and_delivers_nothing_twice(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer).json()["transaction_id"]
    first = end(producer, transaction_id, "commit")

    again = end(producer, transaction_id, "commit")
    from_check = end(producer, transaction_id, "commit", from_transaction_check=True)

    assert again.status_code == from_check.status_code == 200
    assert again.json() == first.json() == from_check.json()
    assert delivered() == 1
    assert Resolution.objects.filter(transaction_id=transaction_id).count() == 1
    assert len(receive(consumer).json()["messages"]) == 1
    assert (
        producer.get(f"/api/v1/transactions/{transaction_id}").json()["resolved_by"] == "producer"
    )


# --- End: rollback -------------------------------------------------------------------------------


def test_rollback_answers_rolled_back_and_the_message_is_never_visible(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer).json()["transaction_id"]

    response = end(producer, transaction_id, "rollback")

    assert response.status_code == 200
    assert response.json() == {"transaction_id": transaction_id, "state": "ROLLED_BACK"}
    assert receive(consumer).json() == {"messages": []}
    assert delivered() == 0


def test_rollback_again_answers_the_same(producer, topic, producer_group):
    transaction_id = send_half(producer).json()["transaction_id"]
    first = end(producer, transaction_id, "rollback")

    again = end(producer, transaction_id, "rollback")

    assert again.status_code == 200
    assert again.json() == first.json()
    assert Resolution.objects.filter(transaction_id=transaction_id).count() == 1


# --- End: unknown --------------------------------------------------------------------------------


def test_unknown_answers_prepared_and_changes_nothing(
    producer, consumer, topic, producer_group, consumer_group
):
    transaction_id = send_half(producer).json()["transaction_id"]
    before = producer.get(f"/api/v1/transactions/{transaction_id}").json()
    stored = Message.objects.count()

    response = end(producer, transaction_id, "unknown", remark="still working")

    assert response.status_code == 200
    assert response.json() == {"transaction_id": transaction_id, "state": "PREPARED"}
    assert producer.get(f"/api/v1/transactions/{transaction_id}").json() == before
    assert Message.objects.count() == stored
    assert receive(consumer).json() == {"messages": []}


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_unknown_after_resolution_answers_the_current_state(
    producer, topic, producer_group, action
):
    transaction_id = send_half(producer).json()["transaction_id"]
    resolved = end(producer, transaction_id, action).json()

    response = end(producer, transaction_id, "unknown")

    assert response.status_code == 200
    assert response.json() == resolved


def test_unknown_after_a_discard_answers_discarded(producer, topic, producer_group):
    transaction_id = send_half(producer).json()["transaction_id"]
    discard(transaction_id)

    response = end(producer, transaction_id, "unknown")

    assert response.status_code == 200
    assert response.json() == {"transaction_id": transaction_id, "state": "DISCARDED"}


# --- End: conflicts and errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "then", "state"),
    [("commit", "rollback", "COMMITTED"), ("rollback", "commit", "ROLLED_BACK")],
)
def test_the_other_action_after_resolution_is_a_conflict(
    producer, topic, producer_group, first, then, state
):
    transaction_id = send_half(producer).json()["transaction_id"]
    end(producer, transaction_id, first)
    stored = Message.objects.count()

    response = end(producer, transaction_id, then)

    error = assert_error(response, 409, "transaction_already_resolved")
    assert error["details"]["state"] == state
    assert error["details"]["transaction_id"] == transaction_id
    assert producer.get(f"/api/v1/transactions/{transaction_id}").json()["state"] == state
    assert Message.objects.count() == stored


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_commit_or_rollback_after_a_discard_is_a_conflict(
    producer, consumer, topic, producer_group, consumer_group, action
):
    transaction_id = send_half(producer).json()["transaction_id"]
    discard(transaction_id)

    response = end(producer, transaction_id, action)

    error = assert_error(response, 409, "transaction_already_resolved")
    assert error["details"]["state"] == "DISCARDED"
    assert receive(consumer).json() == {"messages": []}
    assert producer.get(f"/api/v1/transactions/{transaction_id}").json()["state"] == "DISCARDED"


def test_end_with_another_producer_group_than_the_sender_is_forbidden(owner, topic, producer_group):
    producer_group_create(name="H", check_url=None)
    transaction_id = send_half(owner, producer_group="G").json()["transaction_id"]
    both = key_client("both", producer_groups=["G", "H"])

    for client in (owner, both):
        error = assert_error(end(client, transaction_id, "commit", producer_group="H"), 403)
        assert error["code"] == "producer_group_mismatch"
        assert error["details"] == {"transaction_id": transaction_id}
    assert owner.get(f"/api/v1/transactions/{transaction_id}").json()["state"] == "PREPARED"
    assert delivered() == 0


def test_ending_an_unknown_transaction_is_not_found(producer, producer_group):
    error = assert_error(end(producer, "NO-SUCH-TX", "commit"), 404, "transaction_not_found")

    assert error["details"] == {"transaction_id": "NO-SUCH-TX"}


@pytest.mark.parametrize(
    "data",
    [
        {"producer_group": "G", "action": "COMMIT_MESSAGE"},
        {"producer_group": "G", "action": "maybe"},
        {"producer_group": "G"},
        {"action": "commit"},
        {"producer_group": "G", "action": "commit", "from_transaction_check": "perhaps"},
    ],
)
def test_an_invalid_end_is_refused(producer, topic, producer_group, data):
    transaction_id = send_half(producer).json()["transaction_id"]

    response = post(producer, f"/api/v1/transactions/{transaction_id}/end", data)

    assert_error(response, 400, "invalid_input")
    assert Transaction.objects.get(pk=transaction_id).state == "PREPARED"


def test_an_end_from_a_transaction_check_is_recorded_as_resolved_by_check(
    producer, topic, producer_group
):
    transaction_id = send_half(producer).json()["transaction_id"]

    end(producer, transaction_id, "rollback", from_transaction_check=True, remark="check said so")

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()
    assert tx["resolved_by"] == "check"
    assert Resolution.objects.get(transaction_id=transaction_id).reason == "check said so"


# --- Read one ------------------------------------------------------------------------------------


def test_a_producer_reads_its_transaction(producer, topic, producer_group):
    before = int(time.time() * 1000)
    transaction_id = send_half(producer, tags="TagA", keys="k1 k2").json()["transaction_id"]

    response = producer.get(f"/api/v1/transactions/{transaction_id}")

    assert response.status_code == 200
    tx = response.json()
    assert {
        "transaction_id",
        "producer_group",
        "topic",
        "tags",
        "keys",
        "state",
        "check_times",
        "born_timestamp",
        "resolved_timestamp",
        "resolved_by",
    } <= set(tx)
    assert tx["transaction_id"] == transaction_id
    assert (tx["producer_group"], tx["topic"], tx["tags"], tx["keys"]) == (
        "G",
        "TranTest",
        "TagA",
        "k1 k2",
    )
    assert tx["state"] == "PREPARED"
    assert tx["check_times"] == 0
    assert before <= tx["born_timestamp"] <= int(time.time() * 1000)
    assert tx["resolved_timestamp"] is None
    assert tx["resolved_by"] is None


def test_a_resolved_transaction_shows_when_and_by_whom(producer, topic, producer_group):
    transaction_id = send_half(producer).json()["transaction_id"]

    end(producer, transaction_id, "commit")

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()
    assert tx["state"] == "COMMITTED"
    assert tx["resolved_by"] == "producer"
    assert tx["born_timestamp"] <= tx["resolved_timestamp"] <= int(time.time() * 1000)


def test_a_discarded_transaction_shows_resolved_by_discard(producer, topic, producer_group):
    transaction_id = send_half(producer).json()["transaction_id"]

    discard(transaction_id)

    tx = producer.get(f"/api/v1/transactions/{transaction_id}").json()
    assert tx["state"] == "DISCARDED"
    assert tx["resolved_by"] == "discard"
    assert Message.objects.filter(
        topic="TRANS_CHECK_MAX_TIME_TOPIC", msg_id=transaction_id
    ).exists()
    assert delivered() == 0


def test_an_unknown_transaction_is_not_found(owner, producer):
    assert_error(owner.get("/api/v1/transactions/NO-SUCH-TX"), 404, "transaction_not_found")
    assert_error(producer.get("/api/v1/transactions/NO-SUCH-TX"), 404, "transaction_not_found")


# --- List ----------------------------------------------------------------------------------------


@pytest.fixture
def history(owner, topic, producer_group):
    """Five transactions: G on TranTest (prepared, committed, rolled back, discarded) and H on
    Other (prepared)."""
    producer_group_create(name="H", check_url=None)
    post(owner, "/api/v1/topics", {"name": "Other", "queue_nums": 1})
    ids = {}
    for name in ("prepared", "committed", "rolled_back", "discarded"):
        ids[name] = send_half(owner).json()["transaction_id"]
    end(owner, ids["committed"], "commit")
    end(owner, ids["rolled_back"], "rollback")
    discard(ids["discarded"])
    ids["other"] = send_half(owner, producer_group="H", topic="Other").json()["transaction_id"]
    return ids


def listed(client, query: str = "") -> list[str]:
    response = client.get(f"/api/v1/transactions{query}")
    assert response.status_code == 200, response.content
    return [t["transaction_id"] for t in response.json()["results"]]


def test_the_list_is_paginated_oldest_first(owner, history):
    response = owner.get("/api/v1/transactions")

    body = response.json()
    assert {"count", "next", "previous", "results"} <= set(body)
    assert body["count"] == 5
    assert body["previous"] is None and body["next"] is None
    assert [t["transaction_id"] for t in body["results"]] == [
        history[n] for n in ("prepared", "committed", "rolled_back", "discarded", "other")
    ]
    assert set(body["results"][0]) == set(
        owner.get(f"/api/v1/transactions/{history['other']}").json()
    )


def test_the_list_pages_by_page_size(owner, history):
    first = owner.get("/api/v1/transactions?page_size=2").json()
    third = owner.get("/api/v1/transactions?page_size=2&page=3").json()

    assert first["count"] == 5
    assert len(first["results"]) == 2
    assert "page=2" in first["next"]
    assert [t["transaction_id"] for t in third["results"]] == [history["other"]]
    assert third["next"] is None


def test_a_page_past_the_end_is_not_found(owner, history):
    assert_error(owner.get("/api/v1/transactions?page=9"), 404)


@pytest.mark.parametrize(
    ("state", "names"),
    [
        ("PREPARED", ["prepared", "other"]),
        ("COMMITTED", ["committed"]),
        ("ROLLED_BACK", ["rolled_back"]),
        ("DISCARDED", ["discarded"]),
    ],
)
def test_the_list_filters_by_state(owner, history, state, names):
    assert listed(owner, f"?state={state}") == [history[n] for n in names]


def test_the_list_filters_by_producer_group_and_topic(owner, history):
    assert listed(owner, "?producer_group=H") == [history["other"]]
    assert listed(owner, "?topic=Other") == [history["other"]]
    assert len(listed(owner, "?producer_group=G&topic=TranTest")) == 4
    assert listed(owner, "?producer_group=G&state=PREPARED") == [history["prepared"]]
    assert listed(owner, "?producer_group=H&topic=TranTest") == []


def test_a_producer_lists_only_its_groups_transactions(producer, history):
    assert len(listed(producer)) == 4
    assert history["other"] not in listed(producer)
    assert listed(producer, "?producer_group=H") == []
    assert listed(producer, "?topic=Other") == []


@pytest.mark.parametrize("query", ["?state=DONE", "?state=prepared", "?producer_group=bad%20name"])
def test_an_invalid_list_filter_is_refused(owner, query):
    assert_error(owner.get(f"/api/v1/transactions{query}"), 400, "invalid_input")


def test_listing_transactions_takes_a_fixed_number_of_queries(
    owner, topic, producer_group, django_assert_max_num_queries
):
    producer_group_create(name="H", check_url=None)
    for i in range(30):
        tx = send_half(owner, producer_group="GH"[i % 2]).json()["transaction_id"]
        if i % 3 == 0:
            end(owner, tx, "commit", producer_group="GH"[i % 2])

    with django_assert_max_num_queries(3):
        response = owner.get("/api/v1/transactions?page_size=25")

    assert response.status_code == 200
    assert len(response.json()["results"]) == 25


def test_listing_a_producers_transactions_takes_a_fixed_number_of_queries(
    owner, producer, topic, producer_group, django_assert_max_num_queries
):
    for _ in range(20):
        send_half(owner)

    with django_assert_max_num_queries(3):
        response = producer.get("/api/v1/transactions")

    assert len(response.json()["results"]) == 20


# --- Check requests (poll) -----------------------------------------------------------------------


def test_a_polling_producer_with_nothing_to_check_gets_an_empty_list(producer, producer_group):
    response = producer.get("/api/v1/producer-groups/G/check-requests?wait_ms=0")

    assert response.status_code == 200
    assert response.json() == {"check_requests": []}


def test_polling_a_fresh_transaction_hands_out_no_check(producer, topic, producer_group):
    send_half(producer)

    response = producer.get("/api/v1/producer-groups/G/check-requests")

    assert response.json() == {"check_requests": []}


def test_a_poll_waits_up_to_wait_ms_when_there_is_nothing(producer, producer_group):
    started = time.monotonic()

    response = producer.get("/api/v1/producer-groups/G/check-requests?wait_ms=300")

    assert response.json() == {"check_requests": []}
    assert time.monotonic() - started >= 0.3


def test_polling_an_unknown_producer_group_is_not_found(owner):
    assert_error(
        owner.get("/api/v1/producer-groups/Nope/check-requests"), 404, "producer_group_not_found"
    )


def test_polling_another_groups_check_requests_is_forbidden(producer, producer_group):
    producer_group_create(name="H", check_url=None)

    error = assert_error(
        producer.get("/api/v1/producer-groups/H/check-requests"), 403, "permission_denied"
    )

    assert error["details"] == {"producer_group": "H"}


@pytest.mark.parametrize("wait_ms", ["-1", "30001", "soon"])
def test_a_poll_wait_outside_0_to_30000_ms_is_invalid(producer, producer_group, wait_ms):
    response = producer.get(f"/api/v1/producer-groups/G/check-requests?wait_ms={wait_ms}")

    error = assert_error(response, 400, "invalid_input")
    assert "wait_ms" in error["details"]["fields"]

"""api-v1 Authentication: Bearer access keys, admin-only endpoints, and per-group rights of
producer and consumer keys."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from broker.models import ProducerGroup
from broker.services.topology.writes import (
    access_key_create,
    consumer_group_create,
    producer_group_create,
)
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
from tests.conftest import client_for

EVERY_API_ENDPOINT = [
    ("get", "/api/v1/topics"),
    ("post", "/api/v1/topics"),
    ("get", "/api/v1/topics/TranTest"),
    ("get", "/api/v1/producer-groups"),
    ("post", "/api/v1/producer-groups"),
    ("get", "/api/v1/producer-groups/G"),
    ("patch", "/api/v1/producer-groups/G"),
    ("get", "/api/v1/producer-groups/G/check-requests"),
    ("get", "/api/v1/consumer-groups"),
    ("post", "/api/v1/consumer-groups"),
    ("post", "/api/v1/consumer-groups/C/receive"),
    ("post", "/api/v1/consumer-groups/C/ack"),
    ("get", "/api/v1/messages?topic=TranTest&key=k"),
    ("post", "/api/v1/messages"),
    ("get", "/api/v1/messages/ABC"),
    ("get", "/api/v1/transactions"),
    ("post", "/api/v1/transactions"),
    ("get", "/api/v1/transactions/ABC"),
    ("post", "/api/v1/transactions/ABC/end"),
]

ADMIN_ONLY = [
    ("get", "/api/v1/topics", None),
    ("post", "/api/v1/topics", {"name": "Other", "queue_nums": 2}),
    ("get", "/api/v1/topics/TranTest", None),
    ("get", "/api/v1/producer-groups", None),
    ("post", "/api/v1/producer-groups", {"name": "H", "check_url": None}),
    ("get", "/api/v1/producer-groups/G", None),
    ("patch", "/api/v1/producer-groups/G", {"check_url": "http://127.0.0.1:9000/check"}),
    ("get", "/api/v1/consumer-groups", None),
    ("post", "/api/v1/consumer-groups", {"name": "D"}),
]


def call(client, method, url, data=None):
    if method == "get":
        return client.get(url)
    return getattr(client, method)(url, data or {}, format="json")


# --- Authentication ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), EVERY_API_ENDPOINT)
def test_every_api_endpoint_refuses_a_caller_without_a_token(anonymous, method, url):
    response = call(anonymous, method, url)

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), EVERY_API_ENDPOINT)
def test_every_api_endpoint_refuses_an_unknown_token(method, url):
    response = call(client_for("hm_not-a-real-token"), method, url)

    assert_error(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    ["Token {token}", "Basic {token}", "{token}", "Bearer", "Bearer ", "bearer{token}"],
)
def test_a_token_with_the_wrong_scheme_is_refused(owner_token, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.format(token=owner_token))

    response = client.get("/api/v1/topics")

    assert_error(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"] == 'Bearer realm="halfmoon"'


@pytest.mark.django_db
def test_the_bearer_scheme_is_case_insensitive(owner_token):
    assert client_for(owner_token).get("/api/v1/topics").status_code == 200
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"bearer {owner_token}")
    assert client.get("/api/v1/topics").status_code == 200


@pytest.fixture
def owner_token(db) -> str:
    _, token = access_key_create(name="owner-token", is_admin=True)
    return token


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/healthz", "/metrics", "/api/schema/", "/api/docs/"])
def test_operations_endpoints_need_no_token(anonymous, url):
    assert anonymous.get(url).status_code == 200


# --- Admin-only endpoints ------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url", "data"), ADMIN_ONLY)
@pytest.mark.parametrize("person", ["producer", "consumer", "outsider"])
def test_admin_endpoints_refuse_keys_that_are_not_admin(
    request, topic, producer_group, consumer_group, person, method, url, data
):
    client = request.getfixturevalue(person)

    response = call(client, method, url, data)

    assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize(("method", "url", "data"), ADMIN_ONLY)
def test_the_owner_may_use_every_admin_endpoint(
    owner, topic, producer_group, consumer_group, method, url, data
):
    response = call(owner, method, url, data)

    assert response.status_code in (200, 201), response.content


# --- Producer keys -------------------------------------------------------------------------------


def test_a_producer_may_send_half_messages_only_for_its_groups(producer, topic, producer_group):
    producer_group_create(name="H", check_url=None)

    assert send_half(producer, producer_group="G").status_code == 201
    error = assert_error(send_half(producer, producer_group="H"), 403, "permission_denied")
    assert error["details"] == {"producer_group": "H"}


def test_a_producer_may_end_only_its_own_groups_transactions(
    owner, producer, topic, producer_group
):
    producer_group_create(name="H", check_url=None)
    theirs = send_half(owner, producer_group="H").json()["transaction_id"]

    assert_error(end(producer, theirs, "commit", producer_group="H"), 403, "permission_denied")
    assert_error(
        end(producer, theirs, "commit", producer_group="G"), 403, "producer_group_mismatch"
    )
    assert owner.get(f"/api/v1/transactions/{theirs}").json()["state"] == "PREPARED"


def test_a_producer_may_read_only_its_own_groups_transactions(
    owner, producer, topic, producer_group
):
    producer_group_create(name="H", check_url=None)
    ours = send_half(producer).json()["transaction_id"]
    theirs = send_half(owner, producer_group="H").json()["transaction_id"]

    assert producer.get(f"/api/v1/transactions/{ours}").status_code == 200
    assert_error(producer.get(f"/api/v1/transactions/{theirs}"), 403, "permission_denied")


def test_a_producer_listing_transactions_sees_only_its_groups(
    owner, producer, topic, producer_group
):
    producer_group_create(name="H", check_url=None)
    ours = send_half(producer).json()["transaction_id"]
    send_half(owner, producer_group="H")

    listed = producer.get("/api/v1/transactions").json()
    asked_for_theirs = producer.get("/api/v1/transactions?producer_group=H").json()

    assert [t["transaction_id"] for t in listed["results"]] == [ours]
    assert asked_for_theirs["count"] == 0
    assert owner.get("/api/v1/transactions").json()["count"] == 2


def test_a_producer_may_send_normal_messages_to_any_user_topic(producer, topic, owner):
    post(owner, "/api/v1/topics", {"name": "Elsewhere", "queue_nums": 1})

    assert send_message(producer).status_code == 201
    assert send_message(producer, topic="Elsewhere").status_code == 201


def test_a_producer_may_not_send_a_normal_message_in_another_groups_name(producer, topic):
    response = send_message(producer, producer_group="H")

    assert_error(response, 403, "permission_denied")


def test_a_producer_reads_the_messages_its_groups_sent_and_not_others(owner, producer, topic):
    ours = send_message(producer, keys="k1").json()["msg_id"]
    theirs = send_message(owner, keys="k1").json()["msg_id"]

    assert producer.get(f"/api/v1/messages/{ours}").status_code == 200
    assert_error(producer.get(f"/api/v1/messages/{theirs}"), 404, "message_not_found")
    found = producer.get("/api/v1/messages?topic=TranTest&key=k1").json()
    assert [m["msg_id"] for m in found] == [ours]
    assert {m["msg_id"] for m in owner.get("/api/v1/messages?topic=TranTest&key=k1").json()} == {
        ours,
        theirs,
    }


@pytest.mark.parametrize("person", ["consumer", "outsider"])
def test_keys_without_a_producer_group_may_not_produce_or_read_messages(
    request, owner, topic, producer_group, person
):
    client = request.getfixturevalue(person)
    msg_id = send_message(owner).json()["msg_id"]
    transaction_id = send_half(owner).json()["transaction_id"]

    assert_error(send_message(client), 403, "permission_denied")
    assert_error(send_half(client), 403, "permission_denied")
    assert_error(end(client, transaction_id, "commit"), 403, "permission_denied")
    assert_error(client.get(f"/api/v1/messages/{msg_id}"), 403, "permission_denied")
    assert_error(client.get("/api/v1/messages?topic=TranTest&key=k"), 403, "permission_denied")
    assert_error(client.get(f"/api/v1/transactions/{transaction_id}"), 403, "permission_denied")
    assert_error(client.get("/api/v1/transactions"), 403, "permission_denied")
    assert_error(client.get("/api/v1/producer-groups/G/check-requests"), 403, "permission_denied")


def test_a_key_with_two_producer_groups_acts_for_both(owner, topic, producer_group):
    producer_group_create(name="H", check_url=None)
    both = key_client("both", producer_groups=["G", "H"])

    for group in ("G", "H"):
        transaction_id = send_half(both, producer_group=group).json()["transaction_id"]
        assert end(both, transaction_id, "commit", producer_group=group).status_code == 200
    assert both.get("/api/v1/transactions").json()["count"] == 2


# --- Consumer keys -------------------------------------------------------------------------------


def test_a_consumer_may_receive_and_ack_only_for_its_groups(consumer, topic, consumer_group):
    consumer_group_create(name="D")

    assert receive(consumer, group="C").status_code == 200
    assert ack(consumer, ["nope"], group="C").status_code == 200
    error = assert_error(receive(consumer, group="D"), 403, "permission_denied")
    assert error["details"] == {"consumer_group": "D"}
    assert_error(ack(consumer, ["nope"], group="D"), 403, "permission_denied")


@pytest.mark.parametrize("person", ["producer", "outsider"])
def test_keys_without_a_consumer_group_may_not_receive_or_ack(
    request, topic, consumer_group, person
):
    client = request.getfixturevalue(person)

    assert_error(receive(client), 403, "permission_denied")
    assert_error(ack(client, ["handle"]), 403, "permission_denied")


def test_the_owner_may_do_everything(owner, topic, producer_group, consumer_group):
    transaction_id = send_half(owner).json()["transaction_id"]

    assert end(owner, transaction_id, "commit").status_code == 200
    received = receive(owner).json()["messages"]
    assert [m["msg_id"] for m in received] == [transaction_id]
    assert ack(owner, [received[0]["receipt_handle"]]).json() == {"acked": 1, "failed": []}
    assert owner.get("/api/v1/producer-groups/G/check-requests").status_code == 200
    assert ProducerGroup.objects.filter(name="G").exists()

"""GET /api/v1/producer-groups/{name}/clients and /api/v1/consumer-groups/{name}/clients: the
RocketMQ clients of a group seen over gRPC (broker/selectors/clients.py), an addition to api-v1
(docs/api.md)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import ClientConnection
from broker.rules.clock import now_ms
from broker.selectors.clients import RECENTLY_GONE_MS, client_connections_of_producer_group
from tests.api_helpers import assert_error, key_client

EXPIRY_MS = 120_000  # HALFMOON_GRPC_CLIENT_EXPIRY_MS of the tests

CLIENT_FIELDS = {
    "client_id",
    "language",
    "version",
    "kind",
    "host",
    "access_key",
    "producer_groups",
    "consumer_group",
    "topics",
    "connected_timestamp",
    "last_heartbeat_timestamp",
    "disconnected_timestamp",
    "live",
}


@pytest.fixture(autouse=True)
def _expiry(broker_settings) -> None:
    broker_settings["HALFMOON_GRPC_CLIENT_EXPIRY_MS"] = EXPIRY_MS


def producer_client(client_id: str, *, heard_ms_ago: int = 0, **fields: Any) -> ClientConnection:
    """A transactional producer of group G publishing TranTest, heard from ``heard_ms_ago``."""
    now = now_ms()
    defaults: dict[str, Any] = {
        "kind": ClientConnection.Kind.PRODUCER,
        "language": "PYTHON",
        "version": "5.1.2",
        "host": "10.0.0.7:50412",
        "access_key": "producer",
        "producer_groups": ["G"],
        "topics": ["TranTest"],
        "server": "grpc-1",
        "connected_timestamp": now - heard_ms_ago - 1000,
        "last_heartbeat_timestamp": now - heard_ms_ago,
    }
    return ClientConnection.objects.create(client_id=client_id, **{**defaults, **fields})


def consumer_client(client_id: str, *, group: str = "C", **fields: Any) -> ClientConnection:
    """A SimpleConsumer of consumer group ``group`` subscribed to TranTest."""
    fields.setdefault("kind", ClientConnection.Kind.SIMPLE_CONSUMER)
    return producer_client(
        client_id, producer_groups=[], consumer_group=group, language="HTTP", **fields
    )


def clients_of(client, side: str, name: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/{side}-groups/{name}/clients")
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"clients"}
    return response.json()["clients"]


# --- What a producer group's list holds -------------------------------------------------------


def test_a_live_producer_client_is_listed_with_every_field(owner, producer_group):
    made = producer_client("host@123@1@abc")

    [shown] = clients_of(owner, "producer", "G")

    assert set(shown) == CLIENT_FIELDS
    assert shown == {
        "client_id": "host@123@1@abc",
        "language": "PYTHON",
        "version": "5.1.2",
        "kind": "PRODUCER",
        "host": "10.0.0.7:50412",
        "access_key": "producer",
        "producer_groups": ["G"],
        "consumer_group": "",
        "topics": ["TranTest"],
        "connected_timestamp": made.connected_timestamp,
        "last_heartbeat_timestamp": made.last_heartbeat_timestamp,
        "disconnected_timestamp": None,
        "live": True,
    }


def test_live_clients_come_first_then_the_recently_gone(owner, producer_group):
    now = now_ms()
    producer_client("silent", heard_ms_ago=EXPIRY_MS + 5_000)  # no heartbeat: not live
    producer_client("left", heard_ms_ago=10_000, disconnected_timestamp=now - 9_000)
    producer_client("old-beat", heard_ms_ago=60_000)
    producer_client("fresh", heard_ms_ago=1_000)

    shown = clients_of(owner, "producer", "G")

    assert [(c["client_id"], c["live"]) for c in shown] == [
        ("fresh", True),
        ("old-beat", True),
        ("left", False),
        ("silent", False),
    ]
    assert shown[2]["disconnected_timestamp"] == now - 9_000


def test_a_client_is_live_until_the_expiry_has_passed(producer_group):
    now = now_ms()
    producer_client("edge", last_heartbeat_timestamp=now - EXPIRY_MS)
    producer_client("past", last_heartbeat_timestamp=now - EXPIRY_MS - 1)

    shown = client_connections_of_producer_group("G", now=now)

    assert [(c.client_id, c.live) for c in shown] == [("edge", True), ("past", False)]


def test_a_client_gone_exactly_an_hour_ago_is_still_listed(producer_group):
    now = now_ms()
    old = now - RECENTLY_GONE_MS - 10_000
    producer_client(
        "hour", last_heartbeat_timestamp=old, disconnected_timestamp=now - RECENTLY_GONE_MS
    )
    producer_client(
        "over", last_heartbeat_timestamp=old, disconnected_timestamp=now - RECENTLY_GONE_MS - 1
    )
    producer_client("silent-hour", last_heartbeat_timestamp=now - RECENTLY_GONE_MS)
    producer_client("silent-over", last_heartbeat_timestamp=now - RECENTLY_GONE_MS - 1)

    shown = client_connections_of_producer_group("G", now=now)

    assert [c.client_id for c in shown] == ["silent-hour", "hour"]


def test_clients_gone_for_more_than_an_hour_are_not_listed(owner, producer_group):
    now = now_ms()
    producer_client(
        "long-gone",
        heard_ms_ago=RECENTLY_GONE_MS + 60_000,
        disconnected_timestamp=now - RECENTLY_GONE_MS - 30_000,
    )
    producer_client("long-silent", heard_ms_ago=RECENTLY_GONE_MS + 60_000)
    producer_client(
        "just-gone",
        heard_ms_ago=RECENTLY_GONE_MS + 60_000,
        disconnected_timestamp=now - RECENTLY_GONE_MS + 60_000,
    )

    assert [c["client_id"] for c in clients_of(owner, "producer", "G")] == ["just-gone"]


def test_only_the_groups_own_clients_are_listed(owner, producer_group):
    producer_client("mine", producer_groups=["G", "H"])
    producer_client("theirs", producer_groups=["H"])
    consumer_client("a-consumer", group="G")  # a consumer group named G is another group

    assert [c["client_id"] for c in clients_of(owner, "producer", "G")] == ["mine"]


# --- A consumer group's list --------------------------------------------------------------------


def test_a_consumer_groups_simple_and_push_consumers_are_listed(owner, consumer_group):
    consumer_client("simple")
    consumer_client("push", kind=ClientConnection.Kind.PUSH_CONSUMER, heard_ms_ago=500)
    consumer_client("elsewhere", group="D")
    producer_client("a-producer")

    shown = clients_of(owner, "consumer", "C")

    assert [(c["client_id"], c["kind"], c["consumer_group"]) for c in shown] == [
        ("simple", "SIMPLE_CONSUMER", "C"),
        ("push", "PUSH_CONSUMER", "C"),
    ]
    assert all(c["live"] and c["producer_groups"] == [] for c in shown)


def test_a_group_without_clients_answers_an_empty_list(owner, producer_group, consumer_group):
    assert clients_of(owner, "producer", "G") == []
    assert clients_of(owner, "consumer", "C") == []


# --- Who may read them --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rights, status",
    [
        ({"is_admin": True}, 200),
        ({"producer_groups": ["G"]}, 200),
        ({"producer_groups": ["H"]}, 403),
        ({"consumer_groups": ["G"]}, 403),
    ],
)
def test_a_producer_groups_clients_are_read_by_an_admin_or_its_keys(producer_group, rights, status):
    producer_client("c1")
    response = key_client("reader", **rights).get("/api/v1/producer-groups/G/clients")
    if status == 200:
        assert [c["client_id"] for c in response.json()["clients"]] == ["c1"]
    else:
        assert_error(response, status, "permission_denied")


@pytest.mark.parametrize(
    "rights, status",
    [
        ({"is_admin": True}, 200),
        ({"consumer_groups": ["C"]}, 200),
        ({"consumer_groups": ["D"]}, 403),
        ({"producer_groups": ["C"]}, 403),
    ],
)
def test_a_consumer_groups_clients_are_read_by_an_admin_or_its_keys(consumer_group, rights, status):
    consumer_client("c1")
    response = key_client("reader", **rights).get("/api/v1/consumer-groups/C/clients")
    if status == 200:
        assert [c["client_id"] for c in response.json()["clients"]] == ["c1"]
    else:
        assert_error(response, status, "permission_denied")


@pytest.mark.parametrize("side", ["producer", "consumer"])
def test_anonymous_is_refused(anonymous, producer_group, consumer_group, side):
    assert_error(anonymous.get(f"/api/v1/{side}-groups/G/clients"), 401)


def test_an_unknown_group_is_the_contracts_404(owner, db):
    assert_error(owner.get("/api/v1/producer-groups/nope/clients"), 404, "producer_group_not_found")
    assert_error(owner.get("/api/v1/consumer-groups/nope/clients"), 404, "consumer_group_not_found")


def test_a_key_of_another_group_learns_nothing_of_an_unknown_one(db):
    reader = key_client("reader", producer_groups=["G"], consumer_groups=["C"])
    assert_error(reader.get("/api/v1/producer-groups/nope/clients"), 403, "permission_denied")
    assert_error(reader.get("/api/v1/consumer-groups/nope/clients"), 403, "permission_denied")


# --- The OpenAPI document -----------------------------------------------------------------------


@pytest.mark.parametrize("side", ["producer", "consumer"])
def test_the_schema_documents_the_paths(db, side):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"][f"/api/v1/{side}-groups/{{name}}/clients"]["get"]
    assert set(operation["responses"]) >= {"200", "401", "403", "404"}
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    listing = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    item_ref = listing["properties"]["clients"]["items"]["$ref"]
    item = schema["components"]["schemas"][item_ref.rsplit("/", 1)[1]]
    assert set(item["properties"]) == CLIENT_FIELDS

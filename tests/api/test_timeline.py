"""GET /api/v1/transactions/{id}/timeline: an addition to api-v1 (docs/api.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.selectors.timeline_entry import check_channel_name
from broker.services.transactions.end import transaction_end
from tests.api_helpers import assert_error, key_client
from tests.console.transactions.conftest import (  # the fixture short_checks, too
    LIFE_KINDS,
    lived_transaction,
    short_checks,  # noqa: F401
    stuck,
)
from tests.services.checks.test_telemetry import Streams
from tests.services.checks.test_telemetry import client as telemetry_client
from tests.support import due_at, prepare, round_for


def url(tid: str) -> str:
    return f"/api/v1/transactions/{tid}/timeline"


@pytest.mark.usefixtures("short_checks")
def test_the_owner_reads_the_whole_life(owner, topic, producer_group, consumer_group):
    tx, _ = lived_transaction()
    response = owner.get(url(tx.transaction_id))
    assert response.status_code == 200
    body = response.json()
    assert body["transaction_id"] == tx.transaction_id
    assert body["state"] == "COMMITTED"
    kinds = [e["kind"] for e in body["timeline"]]
    assert kinds == LIFE_KINDS
    for entry in body["timeline"]:
        assert set(entry) == {"timestamp", "kind", "title", "actor", "detail", "channel"}
    assert body["timeline"][1]["detail"]["answer"] == "UNKNOW"
    assert body["timeline"][-1]["kind"] == "consumer_acked"
    assert body["timeline"][-1]["timestamp"] is not None  # from the delivery journal


def test_unknown_transaction_is_the_contract_404(owner, db):
    assert_error(owner.get(url("nope")), 404, "transaction_not_found")


@pytest.mark.parametrize(
    "who, status",
    [("group_key", 200), ("other_group_key", 403), ("consumer_key", 403), ("anonymous", 401)],
)
def test_who_may_read_it_is_who_may_read_the_transaction(
    anonymous, topic, producer_group, who, status
):
    tx = stuck(born=1_000)
    clients = {
        "group_key": lambda: key_client("p", producer_groups=["G"]),
        "other_group_key": lambda: key_client("q", producer_groups=["H"]),
        "consumer_key": lambda: key_client("c", consumer_groups=["C"]),
        "anonymous": lambda: anonymous,
    }
    client = clients[who]()
    timeline = client.get(url(tx.transaction_id))
    detail = client.get(f"/api/v1/transactions/{tx.transaction_id}")
    assert timeline.status_code == detail.status_code == status
    if status != 200:
        assert_error(timeline, status)
    else:
        assert timeline.json()["timeline"][0]["kind"] == "half_stored"


def test_the_schema_documents_the_path(owner, db):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/v1/transactions/{transaction_id}/timeline"]["get"]
    assert set(operation["responses"]) >= {"200", "404"}
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    component = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(component["properties"]) == {"transaction_id", "state", "timeline"}


# --- How each check travelled, and which client answered -------------------------------------


@pytest.fixture
def streams(db) -> Iterator[Streams]:
    """A gRPC server process's telemetry streams (a real command listener on the test Redis)."""
    with Streams("timeline-server:1:aa") as s:
        yield s


def _checks(body: dict) -> list[dict]:
    return [e for e in body["timeline"] if e["kind"] in ("check_sent", "check_undelivered")]


@pytest.mark.usefixtures("short_checks")
def test_a_webhook_check_says_webhook(owner, topic, producer_group, consumer_group):
    tx, _ = lived_transaction()

    checks = _checks(owner.get(url(tx.transaction_id)).json())

    assert [(e["actor"], e["channel"]) for e in checks] == [("http", "webhook")] * 2
    assert checks[0]["title"].startswith("Check 1 of 15 sent over webhook: UNKNOW")
    assert all(e["channel"] == "" for e in _others(owner, tx))


def _others(client, tx) -> list[dict]:
    body = client.get(url(tx.transaction_id)).json()
    return [e for e in body["timeline"] if e not in _checks(body)]


def test_a_check_handed_to_a_poller_says_long_poll(owner, producer, topic, producer_group):
    tx = prepare()
    round_for(tx, due_at(tx))  # queues a check request: group G has no check_url

    assert producer.get("/api/v1/producer-groups/G/check-requests").status_code == 200

    [check] = _checks(owner.get(url(tx.transaction_id)).json())
    assert (check["kind"], check["actor"], check["channel"]) == ("check_sent", "poll", "long poll")
    assert "sent over long poll: no answer yet" in check["title"]


def test_a_telemetry_check_names_the_client_it_was_written_to(
    owner, topic, producer_group, streams
):
    streams.held.add("app-1@42")
    telemetry_client("app-1@42", server=streams.server_id)
    tx = prepare(producer_client_id="app-1@42")

    round_for(tx, due_at(tx))

    [check] = _checks(owner.get(url(tx.transaction_id)).json())
    assert (check["actor"], check["channel"]) == ("telemetry", "telemetry (gRPC)")
    assert check["detail"]["client_id"] == "app-1@42"
    assert check["title"].startswith(
        "Check 1 of 15 sent over telemetry (gRPC) to client app-1@42: ACCEPTED in "
    )


def test_a_telemetry_check_no_client_took_says_so(owner, topic, producer_group, db):
    tx = prepare(producer_client_id="gone@1")  # no live client: undelivered

    round_for(tx, due_at(tx))

    [check] = _checks(owner.get(url(tx.transaction_id)).json())
    assert (check["kind"], check["channel"]) == ("check_undelivered", "telemetry (gRPC)")
    assert check["title"].startswith("Check not delivered over telemetry (gRPC) (no live gRPC")


def test_the_end_answering_a_check_over_grpc_names_the_client(owner, topic, producer_group):
    tx = prepare(producer_client_id="app-2@7")
    transaction_end(
        transaction_id=tx.transaction_id,
        producer_group="G",
        action="commit",
        from_transaction_check=True,
        remark="gRPC client app-2@7",
    )

    [resolved] = [
        e for e in owner.get(url(tx.transaction_id)).json()["timeline"] if e["kind"] == "resolved"
    ]
    assert resolved["title"] == (
        "Committed by a check answer of producer group G: gRPC client app-2@7"
    )
    assert resolved["detail"]["reason"] == "gRPC client app-2@7"
    assert resolved["channel"] == ""


@pytest.mark.parametrize(
    "actor, name",
    [("http", "webhook"), ("poll", "long poll"), ("telemetry", "telemetry (gRPC)"), ("x", "x")],
)
def test_each_channel_has_its_operator_facing_name(actor, name):
    assert check_channel_name(actor) == name

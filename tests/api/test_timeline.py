"""GET /api/v1/transactions/{id}/timeline: an addition to api-v1 (docs/api.md)."""

from __future__ import annotations

import pytest

from tests.api_helpers import assert_error, key_client
from tests.console.transactions.conftest import (  # the fixture short_checks, too
    LIFE_KINDS,
    lived_transaction,
    short_checks,  # noqa: F401
    stuck,
)


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
        assert set(entry) == {"timestamp", "kind", "title", "actor", "detail"}
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

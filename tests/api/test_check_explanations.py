"""GET /api/v1/transactions/{id}/check-explanation and
GET /api/v1/producer-groups/{name}/check-explanation: additions to api-v1 (docs/api.md)."""

from __future__ import annotations

import pytest

from broker.models import ProducerGroup, Transaction
from tests.api_helpers import assert_error, key_client
from tests.support import prepare


def tx_url(tid: str) -> str:
    return f"/api/v1/transactions/{tid}/check-explanation"


def group_url(name: str) -> str:
    return f"/api/v1/producer-groups/{name}/check-explanation"


def test_a_transaction_waiting_for_its_immunity(owner, topic, producer_group, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    tx = prepare(check_immunity_seconds=120)
    response = owner.get(tx_url(tx.transaction_id))
    assert response.status_code == 200
    body = response.json()
    assert body["transaction_id"] == tx.transaction_id
    assert body["producer_group"] == "G"
    assert body["state"] == "PREPARED"
    assert body["predicted_check_timestamp"] == tx.born_timestamp + 120_000
    assert body["now"] >= tx.born_timestamp
    assert body["outcome"] == "check"
    assert [r["code"] for r in body["reasons"]] == ["check_immunity"]
    assert "CHECK_IMMUNITY_TIME_IN_SECONDS" in body["reasons"][0]["text"]
    # 120 s of immunity outlast 3 checks 30 s apart
    assert [w["code"] for w in body["warnings"]] == ["immunity_beyond_checks"]
    assert body["down_since"] is None
    values = {v["name"]: (v["value"], v["source"]) for v in body["values"]}
    assert values["check_immunity_ms"] == (120_000, "message property")
    assert values["check_max"] == (3, "setting")
    assert values["check_interval_ms"] == (30_000, "default")
    assert values["group_max_in_flight"] == (16, "default")
    assert values["group_max_per_second"] == (100, "default")
    assert values["undelivered_backoff_ms"] == (1000, "default")
    assert values["transaction_timeout_ms"] == (6000, "default")


def test_a_resolved_transaction(owner, topic, producer_group):
    tx = prepare()
    Transaction.objects.filter(pk=tx.pk).update(
        state="DISCARDED", resolved_by="discard", resolved_timestamp=1, discard_reason="check_max"
    )
    body = owner.get(tx_url(tx.transaction_id)).json()
    assert body["predicted_check_timestamp"] is None
    assert body["outcome"] == "none"
    assert [r["code"] for r in body["reasons"]] == ["resolved"]


def test_the_group_explains_its_next_check(owner, topic, producer_group):
    tx = prepare()
    ProducerGroup.objects.filter(name="G").update(
        check_failures=2, check_backoff_until=tx.born_timestamp + 60_000, unreachable_since=77
    )
    response = owner.get(group_url("G"))
    assert response.status_code == 200
    body = response.json()
    assert body["producer_group"] == "G"
    assert body["pending"] == 1
    assert body["next_transaction_id"] == tx.transaction_id
    assert body["predicted_check_timestamp"] == tx.born_timestamp + 60_000
    assert [r["code"] for r in body["reasons"]] == ["transaction_timeout", "group_backoff"]
    assert body["down_since"] == 77
    assert [w["code"] for w in body["warnings"]] == ["group_down"]
    values = {v["name"]: (v["value"], v["source"]) for v in body["values"]}
    assert values["group_backoff_ms"] == (2000, "default")


def test_unknown_ids_are_the_contract_404(owner, db):
    assert_error(owner.get(tx_url("nope")), 404, "transaction_not_found")
    assert_error(owner.get(group_url("nope")), 404, "producer_group_not_found")


@pytest.mark.parametrize(
    "who, status",
    [("group_key", 200), ("other_group_key", 403), ("consumer_key", 403), ("anonymous", 401)],
)
def test_who_may_read_them(anonymous, topic, producer_group, who, status):
    tx = prepare()
    clients = {
        "group_key": lambda: key_client("p", producer_groups=["G"]),
        "other_group_key": lambda: key_client("q", producer_groups=["H"]),
        "consumer_key": lambda: key_client("c", consumer_groups=["C"]),
        "anonymous": lambda: anonymous,
    }
    client = clients[who]()
    explained = client.get(tx_url(tx.transaction_id))
    detail = client.get(f"/api/v1/transactions/{tx.transaction_id}")
    assert explained.status_code == detail.status_code == status
    group = client.get(group_url("G"))
    assert group.status_code == status
    if status != 200:
        assert_error(explained, status)
        assert_error(group, status)


def test_the_schema_documents_the_paths(owner, db):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, fields in [
        ("/api/v1/transactions/{transaction_id}/check-explanation", {"transaction_id", "state"}),
        ("/api/v1/producer-groups/{name}/check-explanation", {"pending", "next_transaction_id"}),
    ]:
        operation = schema["paths"][path]["get"]
        assert set(operation["responses"]) >= {"200", "404"}
        ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        component = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert set(component["properties"]) >= fields | {
            "predicted_check_timestamp",
            "outcome",
            "reasons",
            "warnings",
            "values",
            "down_since",
            "now",
            "producer_group",
        }

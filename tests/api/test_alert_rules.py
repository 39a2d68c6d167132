"""/api/v1/alert-rules: Halfmoon's own alert rules, an addition to api-v1
(docs/api.md). Admin key only; the contract's error body for every refusal; the
OpenAPI document says what the endpoints do."""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import Alert, AlertRule, Transaction
from broker.services.alerts import alerts_evaluate
from tests.api_helpers import assert_error, post, send_half

RULES = "/api/v1/alert-rules"


@pytest.fixture
def document(anonymous, db) -> dict[str, Any]:
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def test_an_admin_creates_lists_reads_changes_and_deletes_a_rule(owner, producer_group):
    created = post(owner, RULES, {"name": "stuck", "kind": "oldest_pending", "group": "G"})

    assert created.status_code == 201
    body = created.json()
    assert body == {
        "name": "stuck",
        "kind": "oldest_pending",
        "group": "G",
        "threshold": 600,  # the kind's default
        "window_s": 3600,
        "severity": "warning",
        "repeat_interval_s": None,
        "enabled": True,
        "description": "",
        "created_timestamp": body["created_timestamp"],
        "updated_timestamp": body["updated_timestamp"],
        "firing": 0,
    }
    assert [r["name"] for r in owner.get(RULES).json()] == ["stuck"]
    assert owner.get(f"{RULES}/stuck").json() == body

    changed = owner.patch(
        f"{RULES}/stuck",
        {"threshold": 60, "severity": "critical", "repeat_interval_s": 0, "group": ""},
        format="json",
    )
    assert changed.status_code == 200
    assert {
        k: changed.json()[k] for k in ("threshold", "severity", "repeat_interval_s", "group")
    } == {
        "threshold": 60,
        "severity": "critical",
        "repeat_interval_s": 0,
        "group": "",
    }
    assert AlertRule.objects.get().threshold == 60

    assert owner.delete(f"{RULES}/stuck").status_code == 204
    assert_error(owner.get(f"{RULES}/stuck"), 404, "alert_rule_not_found")
    assert_error(owner.delete(f"{RULES}/stuck"), 404, "alert_rule_not_found")


def test_each_kind_takes_its_own_defaults(owner, producer_group, consumer_group):
    expected = {
        "oldest_pending": (600, 3600),
        "near_check_max": (2, 3600),
        "group_unreachable": (300, 3600),
        "discard_rate": (10, 3600),
        "dlq_growing": (0, 900),
        "fifo_blocked": (300, 3600),
        "scheduled_overdue": (60, 3600),
    }
    for kind, (threshold, window_s) in expected.items():
        body = post(owner, RULES, {"name": kind.replace("_", "-"), "kind": kind}).json()
        assert (body["threshold"], body["window_s"]) == (threshold, window_s), kind


def test_a_rule_shows_its_firing_alerts(owner, producer, topic, producer_group):
    post(owner, RULES, {"name": "stuck", "kind": "oldest_pending", "threshold": 0})
    transaction_id = send_half(producer).json()["transaction_id"]
    alerts_evaluate(now=Transaction.objects.get(pk=transaction_id).born_timestamp + 1000)

    assert owner.get(RULES).json()[0]["firing"] == 1
    assert owner.get(f"{RULES}/stuck").json()["firing"] == 1


def test_deleting_a_rule_resolves_its_firing_alerts(owner, producer, topic, producer_group):
    post(owner, RULES, {"name": "stuck", "kind": "oldest_pending", "threshold": 0})
    transaction_id = send_half(producer).json()["transaction_id"]
    alerts_evaluate(now=Transaction.objects.get(pk=transaction_id).born_timestamp + 1000)

    assert owner.delete(f"{RULES}/stuck").status_code == 204

    alert = Alert.objects.get()
    assert (alert.state, alert.rule, alert.rule_name) == ("resolved", None, "stuck")


def test_only_an_admin_key_may_touch_rules(anonymous, producer, owner, producer_group):
    post(owner, RULES, {"name": "stuck", "kind": "oldest_pending"})

    assert_error(anonymous.get(RULES), 401, "not_authenticated")
    assert_error(producer.get(RULES), 403, "permission_denied")
    assert_error(post(producer, RULES, {"name": "x", "kind": "oldest_pending"}), 403)
    assert_error(producer.patch(f"{RULES}/stuck", {"threshold": 1}, format="json"), 403)
    assert_error(producer.delete(f"{RULES}/stuck"), 403)
    assert AlertRule.objects.get().threshold == 600


def test_a_duplicate_name_is_409(owner, producer_group):
    post(owner, RULES, {"name": "stuck", "kind": "oldest_pending"})

    error = assert_error(post(owner, RULES, {"name": "stuck", "kind": "discard_rate"}), 409)

    assert error["code"] == "alert_rule_exists"


def test_an_unknown_group_is_404_of_its_kind(owner, producer_group, consumer_group):
    assert_error(
        post(owner, RULES, {"name": "a", "kind": "oldest_pending", "group": "Nobody"}),
        404,
        "producer_group_not_found",
    )
    # dlq_growing watches consumer groups: G is a producer group only.
    assert_error(
        post(owner, RULES, {"name": "b", "kind": "dlq_growing", "group": "G"}),
        404,
        "consumer_group_not_found",
    )
    assert post(owner, RULES, {"name": "c", "kind": "dlq_growing", "group": "C"}).status_code == 201
    assert_error(
        owner.patch(f"{RULES}/c", {"group": "Nobody"}, format="json"),
        404,
        "consumer_group_not_found",
    )
    assert not AlertRule.objects.exclude(name="c").exists()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "x", "kind": "loud"}, "kind"),
        ({"name": "x", "kind": "oldest_pending", "threshold": -1}, "threshold"),
        ({"name": "x", "kind": "oldest_pending", "threshold": "60"}, "threshold"),
        ({"name": "x", "kind": "oldest_pending", "threshold": 1.5}, "threshold"),
        ({"name": "x", "kind": "discard_rate", "window_s": 0}, "window_s"),
        ({"name": "x", "kind": "discard_rate", "window_s": 700_000}, "window_s"),
        ({"name": "x", "kind": "oldest_pending", "severity": "page"}, "severity"),
        ({"name": "x", "kind": "oldest_pending", "enabled": "yes"}, "enabled"),
        ({"name": "x", "kind": "oldest_pending", "repeat_interval_s": -5}, "repeat_interval_s"),
        ({"name": "x y", "kind": "oldest_pending"}, "name"),
        ({"name": "x", "kind": "oldest_pending", "group": "a b"}, "group"),
        ({"name": "x", "kind": "oldest_pending", "description": 7}, "description"),
    ],
)
def test_invalid_input_is_refused_naming_the_field(owner, data, field):
    error = assert_error(post(owner, RULES, data), 400, "invalid_input")

    assert field in error["details"]["fields"]
    assert not AlertRule.objects.exists()


def test_a_patch_cannot_change_a_rules_kind_or_name(owner, producer_group):
    post(owner, RULES, {"name": "stuck", "kind": "oldest_pending"})

    answer = owner.patch(f"{RULES}/stuck", {"kind": "discard_rate", "name": "x"}, format="json")

    assert answer.status_code == 200  # fields that are not the patch's are not read
    assert AlertRule.objects.values_list("name", "kind").get() == ("stuck", "oldest_pending")
    assert_error(owner.patch(f"{RULES}/stuck", {"threshold": "1"}, format="json"), 400)


def test_the_schema_documents_the_rules_endpoints(document):
    paths = document["paths"]
    assert set(paths[RULES]) >= {"get", "post"}
    assert set(paths[f"{RULES}/{{name}}"]) >= {"get", "patch", "delete"}
    assert {"201", "400", "401", "403", "404", "409", "413", "503"} <= set(
        paths[RULES]["post"]["responses"]
    )
    assert set(paths[f"{RULES}/{{name}}"]["delete"]["responses"]) >= {"204", "404"}
    request = paths[RULES]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = document["components"]["schemas"][request["$ref"].rsplit("/", 1)[1]]
    assert set(schema["required"]) == {"name", "kind"}
    kinds = document["components"]["schemas"]["AlertKindEnum"]["enum"]
    assert kinds == [
        "oldest_pending",
        "near_check_max",
        "group_unreachable",
        "discard_rate",
        "dlq_growing",
        "fifo_blocked",
        "scheduled_overdue",
    ]

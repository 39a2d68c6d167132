"""/api/v1/alert-silences: silences of Halfmoon's alerts, an addition to api-v1 (docs/api.md).
Admin key only; the same service as the console (broker.services.alerts.silences): each
silence and each early end is an audit log entry (actor operator:<key name>, via api)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from broker.models import Alert, AlertRule, AlertSilence, AuditEntry
from broker.rules.clock import now_ms
from broker.services.alerts.rules import alert_rule_create
from tests.api_helpers import assert_error, post
from tests.console.conftest import signed_in

SILENCES = "/api/v1/alert-silences"


@pytest.fixture
def alert(db) -> Alert:
    """A firing alert of rule ``stuck`` on group G."""
    rule = alert_rule_create(name="stuck", kind="oldest_pending")
    return Alert.objects.create(
        rule=rule,
        rule_name="stuck",
        kind="oldest_pending",
        severity="warning",
        subject_label="producer_group",
        subject="G",
    )


@pytest.fixture
def document(anonymous, db) -> dict[str, Any]:
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def silence(client: Any, alert: Alert, reason: Any = "deploy in progress", **data: Any) -> Any:
    return post(
        client, SILENCES, {"alert_id": alert.pk, "duration_s": 3600, "reason": reason, **data}
    )


def test_an_admin_silences_lists_reads_and_ends_a_silence_audited(owner, alert):
    before = now_ms()
    created = silence(owner, alert, reason="G is being redeployed, ticket 42")

    assert created.status_code == 201
    made = AlertSilence.objects.get()
    body = created.json()
    assert body == {
        "id": made.pk,
        "rule": "stuck",
        "group": "G",
        "starts_timestamp": made.starts_timestamp,
        "ends_timestamp": made.ends_timestamp,
        "reason": "G is being redeployed, ticket 42",
        "created_by": "operator:owner",
        "expired_by": "",
        "active": True,
    }
    assert before + 3600_000 <= made.ends_timestamp <= now_ms() + 3600_000
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.via, entry.state, entry.reason) == (
        "silence-alert",
        "operator:owner",
        "api",
        "done",
        "G is being redeployed, ticket 42",
    )
    assert made.audit_entry == entry
    assert owner.get(SILENCES).json() == [body]
    assert owner.get(f"{SILENCES}/{made.pk}").json() == body

    ended = post(owner, f"{SILENCES}/{made.pk}/expire", {"reason": "deploy done"})

    assert ended.status_code == 200
    assert (ended.json()["active"], ended.json()["expired_by"]) == (False, "operator:owner")
    made.refresh_from_db()
    assert made.ends_timestamp <= now_ms() and made.expired_by == "operator:owner"
    assert list(AuditEntry.objects.order_by("id").values_list("action", "reason", "via")) == [
        ("silence-alert", "G is being redeployed, ticket 42", "api"),
        ("expire-silence", "deploy done", "api"),
    ]
    assert owner.get(SILENCES).json() == []  # in force only
    assert owner.get(f"{SILENCES}/{made.pk}").json()["active"] is False  # still readable
    assert owner.delete(f"{SILENCES}/{made.pk}").status_code == 405  # ended, never deleted
    again = post(owner, f"{SILENCES}/{made.pk}/expire", {"reason": "again"})
    assert_error(again, 409, "silence_over")
    assert AuditEntry.objects.count() == 2


def test_a_silence_made_by_the_api_is_the_one_the_console_shows(owner, alert, client):
    made = silence(owner, alert).json()
    signed_in(client, "viewer")

    page = client.get(reverse("console:alerts")).content.decode()

    assert f'id="silence-{made["id"]}"' in page
    assert "deploy in progress" in page


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_a_silence_and_its_end_need_a_reason(owner, alert, reason):
    assert_error(silence(owner, alert, reason=reason), 400, "reason_required")
    assert not AlertSilence.objects.exists()

    made = silence(owner, alert).json()
    body = {} if reason is None else {"reason": reason}
    answer = post(owner, f"{SILENCES}/{made['id']}/expire", body)
    assert_error(answer, 400, "reason_required")
    assert AlertSilence.objects.get().expired_by == ""
    assert AuditEntry.objects.count() == 1


def test_unknown_alerts_silences_and_deleted_rules(owner, alert):
    assert_error(
        post(owner, SILENCES, {"alert_id": 999999, "duration_s": 60, "reason": "x"}),
        404,
        "alert_not_found",
    )
    assert_error(owner.get(f"{SILENCES}/999999"), 404, "alert_silence_not_found")
    assert_error(
        post(owner, f"{SILENCES}/999999/expire", {"reason": "x"}),
        404,
        "alert_silence_not_found",
    )
    AlertRule.objects.all().delete()  # the alert's rule is gone: nothing to silence
    assert_error(silence(owner, alert), 409, "alert_rule_deleted")
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"duration_s": 3600, "reason": "x"}, "alert_id"),
        ({"alert_id": "1", "duration_s": 3600, "reason": "x"}, "alert_id"),
        ({"alert_id": 1, "reason": "x"}, "duration_s"),
        ({"alert_id": 1, "duration_s": 0, "reason": "x"}, "duration_s"),
        ({"alert_id": 1, "duration_s": 30 * 86_400 + 1, "reason": "x"}, "duration_s"),
        ({"alert_id": 1, "duration_s": 1.5, "reason": "x"}, "duration_s"),
        ({"alert_id": 1, "duration_s": 60, "reason": 7}, "reason"),
        ({"alert_id": 1, "duration_s": 60, "reason": "x" * 1025}, "reason"),
    ],
)
def test_invalid_input_is_refused_naming_the_field(owner, alert, data, field):
    error = assert_error(post(owner, SILENCES, data), 400, "invalid_input")

    assert field in error["details"]["fields"]
    assert not AlertSilence.objects.exists()


def test_only_an_admin_key_may_touch_silences(anonymous, producer, owner, alert):
    made = silence(owner, alert).json()

    assert_error(anonymous.get(SILENCES), 401, "not_authenticated")
    assert_error(anonymous.get(f"{SILENCES}/{made['id']}"), 401, "not_authenticated")
    assert_error(producer.get(SILENCES), 403, "permission_denied")
    assert_error(producer.get(f"{SILENCES}/{made['id']}"), 403, "permission_denied")
    assert_error(silence(producer, alert), 403, "permission_denied")
    answer = post(producer, f"{SILENCES}/{made['id']}/expire", {"reason": "x"})
    assert_error(answer, 403, "permission_denied")
    assert AlertSilence.objects.get().expired_by == ""
    assert AuditEntry.objects.count() == 1


def test_the_schema_documents_the_silences_endpoints(document):
    paths = document["paths"]
    assert set(paths[SILENCES]) >= {"get", "post"}
    assert set(paths[f"{SILENCES}/{{silence_id}}"]) == {"get"}
    assert {"201", "400", "401", "403", "404", "409", "413", "503"} <= set(
        paths[SILENCES]["post"]["responses"]
    )
    expire = paths[f"{SILENCES}/{{silence_id}}/expire"]["post"]
    assert {"200", "400", "401", "403", "404", "409", "413"} <= set(expire["responses"])
    schemas = document["components"]["schemas"]
    for operation in (paths[SILENCES]["post"], expire):
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert "reason" in schemas[ref.rsplit("/", 1)[1]]["required"]

"""/api/v1/alerts and /api/v1/alert-notifications: what fired and what was notified, an
addition to api-v1 (docs/api.md). Admin key only; the same selectors and retry service as the
console's alerts page (broker.selectors.alerts, broker.services.alerts.notifications)."""

from __future__ import annotations

import pytest

from broker.models import Alert, AlertNotification, AlertRule
from broker.rules.clock import now_ms
from broker.services.alerts.rules import alert_rule_create
from broker.services.alerts.silences import alert_silence
from tests.api_helpers import assert_error, post

ALERTS = "/api/v1/alerts"
NOTIFICATIONS = "/api/v1/alert-notifications"


def _alert(rule: AlertRule, subject: str, **fields) -> Alert:
    return Alert.objects.create(
        rule=rule,
        rule_name=rule.name,
        kind=rule.kind,
        severity=fields.pop("severity", "warning"),
        subject_label="producer_group",
        subject=subject,
        **fields,
    )


@pytest.fixture
def rule(db) -> AlertRule:
    return alert_rule_create(name="stuck", kind="oldest_pending")


def _notification(alert: Alert, state: str, **fields) -> AlertNotification:
    return AlertNotification.objects.create(
        alert=alert, receiver_name="ops", event="firing", state=state, **fields
    )


def test_firing_alerts_come_critical_first_with_the_silence_holding_them(owner, rule):
    older = _alert(rule, "A", started_timestamp=now_ms() - 60_000)
    critical = _alert(rule, "B", severity="critical")
    _alert(rule, "C", state=Alert.State.RESOLVED, resolved_timestamp=now_ms())
    silence = alert_silence(
        alert_id=older.pk, duration_s=600, reason="deploy", actor="console:ann", via="console"
    )

    body = owner.get(ALERTS).json()

    assert [(a["id"], a["subject"], a["silence_id"]) for a in body] == [
        (critical.pk, "B", None),
        (older.pk, "A", silence.pk),
    ]
    assert body[0]["state"] == "firing" and body[0]["rule_name"] == "stuck"


def test_resolved_alerts_are_the_latest_first_and_bounded_by_limit(owner, rule):
    made = [
        _alert(rule, f"G{i}", state=Alert.State.RESOLVED, resolved_timestamp=now_ms())
        for i in range(3)
    ]
    _alert(rule, "firing")

    body = owner.get(ALERTS, {"state": "resolved", "limit": 2}).json()

    assert [a["id"] for a in body] == [made[2].pk, made[1].pk]
    assert {a["silence_id"] for a in body} == {None}


def test_an_alert_answers_with_its_notifications_oldest_first(owner, rule):
    alert = _alert(rule, "A")
    first = _notification(alert, "sent")
    second = _notification(alert, "failed", last_error="HTTP 500")

    body = owner.get(f"{ALERTS}/{alert.pk}").json()

    assert body["id"] == alert.pk and body["silence_id"] is None
    assert [(n["id"], n["state"], n["last_error"]) for n in body["notifications"]] == [
        (first.pk, "sent", ""),
        (second.pk, "failed", "HTTP 500"),
    ]


def test_a_failed_notification_is_listed_and_retried_once(owner, rule):
    alert = _alert(rule, "A")
    failed = _notification(alert, "failed", attempts=5, last_error="timeout")
    _notification(alert, "sent")

    listed = owner.get(NOTIFICATIONS, {"state": "failed"}).json()
    retried = post(owner, f"{NOTIFICATIONS}/{failed.pk}/retry")

    assert [n["id"] for n in listed] == [failed.pk]
    assert retried.status_code == 200
    assert retried.json()["state"] == "pending" and retried.json()["attempts"] == 0
    failed.refresh_from_db()
    assert failed.state == "pending"
    assert_error(post(owner, f"{NOTIFICATIONS}/{failed.pk}/retry"), 409, "notification_not_failed")


def test_unknown_ids_and_bad_queries_answer_the_contract_errors(owner, rule):
    assert_error(owner.get(f"{ALERTS}/999999"), 404, "alert_not_found")
    assert_error(post(owner, f"{NOTIFICATIONS}/999999/retry"), 404, "alert_notification_not_found")
    assert_error(owner.get(ALERTS, {"state": "burning"}), 400)
    assert_error(owner.get(ALERTS, {"limit": 501}), 400)
    assert_error(owner.get(NOTIFICATIONS, {"state": "lost"}), 400)


def test_only_admin_keys_read_alerts_or_retry(producer, consumer, anonymous, rule):
    alert = _alert(rule, "A")
    failed = _notification(alert, "failed")
    for client in (producer, consumer):
        assert_error(client.get(ALERTS), 403)
        assert_error(client.get(f"{ALERTS}/{alert.pk}"), 403)
        assert_error(client.get(NOTIFICATIONS), 403)
        assert_error(post(client, f"{NOTIFICATIONS}/{failed.pk}/retry"), 403)
    assert_error(anonymous.get(ALERTS), 401)
    failed.refresh_from_db()
    assert failed.state == "failed"

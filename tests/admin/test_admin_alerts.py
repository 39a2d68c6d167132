"""The Django admin writes alert rules and receivers through their services
(broker/admin/alerts.py); alerts, notifications and silences are view-only there."""

from __future__ import annotations

from broker.models import Alert, AlertNotification, AlertReceiver, AlertRule, AlertSilence
from broker.services.alerts.rules import alert_rule_create
from broker.services.topology.writes import producer_group_create
from tests.admin.test_admin_site import add, change, form_errors
from tests.services.alerts.conftest import tick
from tests.support import prepare

RULE = {
    "name": "stuck",
    "kind": "oldest_pending",
    "group": "G",
    "threshold": 120,
    "window_s": 3600,
    "severity": "critical",
    "repeat_interval_s": "",
    "enabled": "on",
    "description": "",
}


def test_a_rule_made_in_the_admin_is_the_services(admin_client, db):
    producer_group_create(name="G", check_url=None)

    response = add(admin_client, "alertrule", **RULE)

    assert response.status_code == 302, form_errors(response)
    rule = AlertRule.objects.get()
    assert (rule.kind, rule.group, rule.threshold, rule.severity) == (
        "oldest_pending",
        "G",
        120,
        "critical",
    )
    changed = change(admin_client, "alertrule", rule.pk, **{**RULE, "threshold": 30, "enabled": ""})
    assert changed.status_code == 302, form_errors(changed)
    rule.refresh_from_db()
    assert (rule.threshold, rule.enabled, rule.kind) == (30, False, "oldest_pending")


def test_the_admin_refuses_a_rule_the_service_refuses(admin_client, db):
    errors = form_errors(add(admin_client, "alertrule", **RULE))  # no group G

    assert "Producer group G does not exist." in str(errors)
    bad_window = form_errors(
        add(
            admin_client,
            "alertrule",
            **{**RULE, "group": "", "kind": "discard_rate", "window_s": 0},
        )
    )
    assert "window_s must be between" in str(bad_window)
    assert not AlertRule.objects.exists()


def test_deleting_a_rule_in_the_admin_resolves_its_alerts(admin_client, topic):
    producer_group_create(name="G", check_url=None)
    rule = alert_rule_create(name="stuck", kind="oldest_pending", threshold=0)
    tick(prepare().born_timestamp + 1000)

    response = admin_client.post(f"/admin/broker/alertrule/{rule.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not AlertRule.objects.exists()
    assert Alert.objects.get().state == "resolved"


def test_a_receiver_made_in_the_admin_gets_a_secret_and_a_judged_url(admin_client, db):
    refused = form_errors(
        add(admin_client, "alertreceiver", name="meta", kind="slack", url="http://169.254.169.254/")
    )
    assert "link-local" in str(refused)

    response = add(
        admin_client,
        "alertreceiver",
        name="team",
        kind="slack",
        url="http://127.0.0.1:9/hook",
        enabled="on",
    )

    assert response.status_code == 302, form_errors(response)
    receiver = AlertReceiver.objects.get()
    assert len(receiver.secret) == 64
    page = admin_client.get(f"/admin/broker/alertreceiver/{receiver.pk}/change/").content.decode()
    assert receiver.secret in page


def test_alerts_notifications_and_silences_are_view_only(admin_client, db):
    for model in (Alert, AlertNotification, AlertSilence):
        name = model._meta.model_name
        assert admin_client.get(f"/admin/broker/{name}/").status_code == 200
        assert admin_client.get(f"/admin/broker/{name}/add/").status_code == 403

"""Halfmoon's own alerts in the console: the banner on every page while an alert fires,
silences from the console with a reason (audited, and suppressing what they should), failed
notifications shown and retried, and the rules and receivers an admin manages
(console/views/alerts.py). Notifications go to a real local webhook receiver."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from broker.models import (
    Alert,
    AlertNotification,
    AlertReceiver,
    AlertRule,
    AlertSilence,
    AuditEntry,
    Transaction,
)
from broker.rules.clock import now_ms
from broker.selectors.alerts import BANNER_ALERTS, BANNER_QUERIES, banner
from broker.services.alerts.rules import alert_rule_create
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from tests.console.conftest import signed_in
from tests.console.overview.conftest import console_client
from tests.services.alerts.conftest import announced, hook, tick
from tests.support import prepare

__all__ = ["console_client", "hook"]

PAGES = [
    "/console/",
    "/console/transactions/",
    "/console/audit/",
    "/console/reconciliation/",
    "/console/topics/",
    "/console/producer-groups/",
    "/console/consumer-groups/",
    "/console/alerts/",
    "/console/alerts/rules/",
]


@pytest.fixture
def stuck(db, topic) -> Transaction:
    """Producer group G (polling), a rule ``stuck`` (oldest pending over 0 s, reminders every
    60 s) and a PREPARED transaction it fires on."""
    producer_group_create(name="G", check_url=None)
    alert_rule_create(name="stuck", kind="oldest_pending", threshold=0, repeat_interval_s=60)
    return prepare()


def silence(client: Client, alert: Alert, reason: str = "deploy in progress", **data) -> object:
    return client.post(
        reverse("console:alert_silence", args=[alert.pk]),
        {"duration_s": 3600, "reason": reason, **data},
    )


# --- The banner -------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_the_banner_while_an_alert_fires(console_client, stuck, page):
    viewer = console_client("viewer")
    assert 'id="alerts-banner"' not in viewer.get(page).content.decode()

    tick(stuck.born_timestamp + 1000)

    html = viewer.get(page).content.decode()
    assert 'id="alerts-banner"' in html
    assert "1 alert firing:" in html
    assert f'href="/console/alerts/{Alert.objects.get().pk}/"' in html
    assert ">stuck on G</a>" in html


def test_the_banner_goes_once_the_alert_resolves(console_client, stuck):
    viewer = console_client("viewer")
    tick(stuck.born_timestamp + 1000)
    transaction_end(transaction_id=stuck.pk, producer_group="G", action="commit")
    tick(stuck.born_timestamp + 2000)

    assert 'id="alerts-banner"' not in viewer.get("/console/").content.decode()


def test_the_banner_is_for_signed_in_viewers_only(client, stuck):
    tick(stuck.born_timestamp + 1000)

    assert 'id="alerts-banner"' not in client.get("/console/login/").content.decode()
    signed_in(client, None)
    assert client.get("/console/").status_code == 403


@pytest.mark.parametrize("firing", [0, 1, 30])
def test_the_banner_costs_the_same_queries_whatever_fires(stuck, firing):
    for n in range(firing):
        alert_rule_create(name=f"r{n}", kind="oldest_pending", threshold=0)
    if firing:
        tick(stuck.born_timestamp + 1000)
        AlertNotification.objects.update(state="failed")

    with CaptureQueriesContext(connection) as queries:
        made = banner(now_ms())

    assert made.firing == (firing + 1 if firing else 0)
    assert len(queries) == BANNER_QUERIES + (1 if firing else 0)
    assert len(made.shown) == min(made.firing, BANNER_ALERTS)


def test_a_silenced_alert_leaves_the_banner_but_is_counted(console_client, stuck):
    tick(stuck.born_timestamp + 1000)
    assert silence(console_client("operator"), Alert.objects.get()).status_code == 302

    html = console_client("viewer").get("/console/").content.decode()
    assert "alert firing:" not in html
    assert "1 silenced." in html


# --- Silences ---------------------------------------------------------------------------------


def test_an_operator_silences_with_a_reason_and_it_is_audited(client, stuck, hook):
    user = signed_in(client, "operator", username="olga")
    tick(stuck.born_timestamp + 1000)
    alert = Alert.objects.get()

    before = now_ms()
    answer = silence(client, alert, reason="G is being redeployed, ticket 42")

    assert answer.status_code == 302
    made = AlertSilence.objects.get()
    assert (made.rule.name, made.group, made.created_by) == ("stuck", "G", f"console:{user}")
    assert before + 3600_000 <= made.ends_timestamp <= now_ms() + 3600_000
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.via, entry.state) == (
        "silence-alert",
        "console:olga",
        "console",
        "done",
    )
    assert entry.reason == "G is being redeployed, ticket 42"
    assert entry.scope["rule"] == "stuck" and entry.scope["group"] == "G"
    assert made.audit_entry == entry
    audit_page = client.get("/console/audit/?action=silence-alert").content.decode()
    assert "G is being redeployed, ticket 42" in audit_page
    assert "silenced stuck on G for 1 h" in audit_page


def test_a_silence_needs_a_reason_and_an_operator(console_client, stuck):
    tick(stuck.born_timestamp + 1000)
    alert = Alert.objects.get()

    assert silence(console_client("viewer"), alert).status_code == 403
    operator = console_client("operator")
    answer = silence(operator, alert, reason="   ")
    assert answer.status_code == 302
    assert not AlertSilence.objects.exists()
    assert not AuditEntry.objects.exists()
    assert "Silence refused" in operator.get("/console/alerts/").content.decode()


def test_a_silence_holds_back_reminders_and_the_resolution_still_goes_out(
    console_client, stuck, hook
):
    born = stuck.born_timestamp
    tick(born + 1000)  # fires: notified
    silence(console_client("operator"), Alert.objects.get())

    for seconds in (61, 121, 181):  # reminders due each minute: all held back
        tick(born + seconds * 1000)
    assert announced(hook) == [("firing", "stuck", "G")]

    transaction_end(transaction_id=stuck.pk, producer_group="G", action="commit")
    tick(born + 200_000)
    # Its firing went out, so its end does too: no receiver keeps an alert that never ends.
    assert announced(hook) == [("firing", "stuck", "G"), ("resolved", "stuck", "G")]


def test_an_alert_that_fires_under_a_silence_is_not_notified_at_all(console_client, stuck, hook):
    born = stuck.born_timestamp
    tick(born + 1000)
    silence(console_client("operator"), Alert.objects.get())
    transaction_end(transaction_id=stuck.pk, producer_group="G", action="commit")
    tick(born + 2000)  # resolved (notified: its firing went out before the silence)
    hook.clear()

    again = prepare()  # the rule fires again on G, within the silence
    for seconds in (1, 61, 121):
        tick(again.born_timestamp + seconds * 1000)
    transaction_end(transaction_id=again.pk, producer_group="G", action="rollback")
    tick(again.born_timestamp + 130_000)

    assert announced(hook) == []
    assert list(Alert.objects.order_by("id").values_list("state", "notified")) == [
        ("resolved", True),
        ("resolved", False),
    ]


def test_ending_a_silence_notifies_what_it_held_back_and_is_audited(console_client, stuck, hook):
    operator = console_client("operator")
    born = stuck.born_timestamp
    tick(born + 1000)
    silence(operator, Alert.objects.get())
    transaction_end(transaction_id=stuck.pk, producer_group="G", action="commit")
    tick(born + 2000)
    hook.clear()
    again = prepare()
    tick(again.born_timestamp + 1000)  # firing under the silence: not notified
    assert announced(hook) == []

    made = AlertSilence.objects.get()
    ended = operator.post(
        reverse("console:alert_silence_expire", args=[made.pk]), {"reason": "deploy done"}
    )
    assert ended.status_code == 302
    tick(again.born_timestamp + 2000)

    assert announced(hook) == [("firing", "stuck", "G")]
    made.refresh_from_db()
    assert made.ends_timestamp <= now_ms() and made.expired_by.startswith("console:operator-")
    assert list(AuditEntry.objects.order_by("id").values_list("action", "reason")) == [
        ("silence-alert", "deploy in progress"),
        ("expire-silence", "deploy done"),
    ]


def test_a_silence_is_shown_with_who_and_why(console_client, stuck):
    tick(stuck.born_timestamp + 1000)
    silence(console_client("operator"), Alert.objects.get(), reason="known: ticket 7")

    html = console_client("viewer").get("/console/alerts/").content.decode()

    assert "silenced</span> until" in html
    assert "known: ticket 7" in html
    assert 'id="silence-' in html


# --- Pages ------------------------------------------------------------------------------------


def test_the_alerts_page_lists_firing_alerts_and_notifications(console_client, stuck, hook):
    tick(stuck.born_timestamp + 1000)
    alert = Alert.objects.get()
    notification = AlertNotification.objects.get()

    viewer = console_client("viewer")
    html = viewer.get("/console/alerts/").content.decode()
    assert f'id="alert-{alert.pk}"' in html
    assert "1 pending in G" in html
    assert f'id="notification-{notification.pk}"' in html
    assert "Silence…" not in html  # a viewer cannot silence
    assert "Silence…" in console_client("operator").get("/console/alerts/").content.decode()

    detail = viewer.get(f"/console/alerts/{alert.pk}/").content.decode()
    assert "docs/alerts.md#oldest-pending-transaction-too-old" in detail
    assert f'id="notification-{notification.pk}"' in detail
    assert viewer.get("/console/alerts/999999/").status_code == 404


def test_an_operator_retries_a_failed_notification_from_the_console(console_client, stuck, hook):
    tick(stuck.born_timestamp + 1000)
    AlertNotification.objects.update(state="failed", last_error="HTTP 500: down")
    notification = AlertNotification.objects.get()
    route = reverse("console:alert_notification_retry", args=[notification.pk])

    assert console_client("viewer").post(route).status_code == 403
    assert console_client("operator").post(route).status_code == 302

    notification.refresh_from_db()
    assert notification.state == "pending"
    tick(stuck.born_timestamp + 2000)
    assert len(hook.received()) == 2  # the first delivery, then the retried one


# --- Rules and receivers (admins) ------------------------------------------------------------


def test_an_admin_creates_edits_and_deletes_a_rule_in_the_console(console_client, db):
    producer_group_create(name="G", check_url=None)
    admin = console_client("admin")

    created = admin.post(
        reverse("console:alert_rule_create"),
        {
            "name": "g-down",
            "kind": "group_unreachable",
            "group": "G",
            "threshold": "120",
            "window_s": "",
            "severity": "critical",
            "repeat_interval_s": "",
            "enabled": "on",
            "description": "Page the G team.",
        },
    )
    assert created.status_code == 302
    rule = AlertRule.objects.get()
    assert (rule.kind, rule.group, rule.threshold, rule.severity, rule.window_s) == (
        "group_unreachable",
        "G",
        120,
        "critical",
        3600,
    )
    assert "g-down" in admin.get(reverse("console:alert_rules")).content.decode()

    edited = admin.post(
        reverse("console:alert_rule_edit", args=["g-down"]),
        {"group": "", "threshold": "60", "window_s": "3600", "severity": "warning"},
    )
    assert edited.status_code == 302
    rule.refresh_from_db()
    assert (rule.group, rule.threshold, rule.enabled) == ("", 60, False)

    assert admin.post(reverse("console:alert_rule_delete", args=["g-down"])).status_code == 302
    assert not AlertRule.objects.exists()


def test_a_rule_for_an_unknown_group_is_a_form_error(console_client, db):
    admin = console_client("admin")
    answer = admin.post(
        reverse("console:alert_rule_create"),
        {"name": "x", "kind": "oldest_pending", "group": "Nobody", "severity": "warning"},
    )

    assert answer.status_code == 400
    assert "Producer group Nobody does not exist." in answer.content.decode()
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_manage_rules_and_receivers(console_client, db, role):
    alert_rule_create(name="stuck", kind="oldest_pending")
    user = console_client(role)

    assert user.get(reverse("console:alert_rules")).status_code == 200
    assert user.get(reverse("console:alert_rule_create")).status_code == 403
    assert user.post(reverse("console:alert_rule_delete", args=["stuck"])).status_code == 403
    assert user.get(reverse("console:alert_receivers")).status_code == 403
    assert user.get(reverse("console:alert_receiver_create")).status_code == 403
    assert AlertRule.objects.exists()


def test_a_new_receiver_shows_its_secret_once(console_client, db):
    admin = console_client("admin")
    answer = admin.post(
        reverse("console:alert_receiver_create"),
        {"name": "team", "kind": "slack", "url": "http://127.0.0.1:9/hook", "enabled": "on"},
    )

    assert answer.status_code == 200
    receiver = AlertReceiver.objects.get()
    assert receiver.secret in answer.content.decode()
    listing = admin.get(reverse("console:alert_receivers")).content.decode()
    assert "http://127.0.0.1:9/hook" in listing
    assert receiver.secret not in listing
    edit = admin.get(reverse("console:alert_receiver_edit", args=["team"])).content.decode()
    assert receiver.secret not in edit


def test_a_receiver_url_the_rule_refuses_is_a_form_error(console_client, db):
    answer = console_client("admin").post(
        reverse("console:alert_receiver_create"),
        {"name": "meta", "kind": "alertmanager", "url": "http://169.254.169.254/", "enabled": "on"},
    )

    assert answer.status_code == 400
    assert "link-local" in answer.content.decode()
    assert not AlertReceiver.objects.exists()


def test_an_admin_edits_and_deletes_an_email_receiver(console_client, db):
    admin = console_client("admin")
    admin.post(
        reverse("console:alert_receiver_create"),
        {"name": "mail", "kind": "email", "emails": "a@example.com", "enabled": "on"},
    )
    edited = admin.post(
        reverse("console:alert_receiver_edit", args=["mail"]),
        {"emails": "a@example.com, b@example.com"},
    )
    assert edited.status_code == 302
    receiver = AlertReceiver.objects.get()
    assert (receiver.emails, receiver.enabled) == (["a@example.com", "b@example.com"], False)
    bad = admin.post(reverse("console:alert_receiver_edit", args=["mail"]), {"emails": "nope"})
    assert bad.status_code == 400

    assert admin.post(reverse("console:alert_receiver_delete", args=["mail"])).status_code == 302
    assert not AlertReceiver.objects.exists()


def test_changing_a_rule_in_the_console_resolves_its_alert_at_the_next_evaluation(
    console_client, stuck, hook
):
    tick(stuck.born_timestamp + 1000)
    console_client("admin").post(
        reverse("console:alert_rule_edit", args=["stuck"]),
        {"group": "", "threshold": "0", "window_s": "3600", "severity": "warning"},  # disabled
    )
    tick(stuck.born_timestamp + 2000)

    assert announced(hook) == [("firing", "stuck", "G"), ("resolved", "stuck", "G")]
    assert not AlertRule.objects.get().enabled

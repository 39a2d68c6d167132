"""Notifications: reminders while an alert fires, Slack and e-mail receivers, delivery after
the evaluation's commit with timeouts and retries, failures kept and shown, webhook targets
under the check-target rule, receivers and rules deleted or disabled (broker.services.alerts).
The receivers are real local HTTP servers (``tests.support.CheckServer``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.core import mail
from django.test import Client

from broker.errors import InvalidInput
from broker.models import Alert, AlertNotification, AlertReceiver, AlertRule, Transaction
from broker.rules.clock import now_ms
from broker.services.alerts import alerts_evaluate, notifications_deliver
from broker.services.alerts.notifications import notification_retry
from broker.services.alerts.receivers import receiver_create, receiver_delete
from broker.services.alerts.rules import alert_rule_create, alert_rule_update
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from tests.console.conftest import signed_in
from tests.services.alerts.conftest import announced, tick
from tests.support import check_server_running, closed_port_url, expected_signature, prepare


@pytest.fixture
def pending_tx(db, topic) -> Transaction:
    """A PREPARED transaction of producer group G (which polls), and a rule ``stuck`` firing on
    it at once (oldest pending over 0 s)."""
    producer_group_create(name="G", check_url=None)
    alert_rule_create(name="stuck", kind="oldest_pending", threshold=0)
    return prepare()


def events(server) -> list[str]:  # noqa: ANN001 - a CheckServer
    """The ``event`` of each Slack message or Alertmanager body received, in order: the
    Slack text's [TAG], or the Alertmanager status."""
    out = []
    for request in server.received():
        body = request.body
        out.append(body["text"].split("]")[0][1:] if "text" in body else body["status"])
    return out


def test_a_reminder_follows_the_repeat_interval_while_it_fires(pending_tx, hook):
    alert_rule_update(name="stuck", repeat_interval_s=60)
    born = pending_tx.born_timestamp

    for seconds in (1, 30, 60, 61, 90, 120, 121, 122):
        tick(born + seconds * 1000)

    # Fired at 1 s, reminded at 61 s and 121 s: firing bodies each time, never more.
    assert announced(hook) == [("firing", "stuck", "G")] * 3
    notifications = list(AlertNotification.objects.order_by("id"))
    assert [n.event for n in notifications] == ["firing", "reminder", "reminder"]
    assert all(n.state == "sent" for n in notifications)


def test_no_reminder_with_a_repeat_interval_of_0(pending_tx, hook, broker_settings):
    broker_settings["HALFMOON_ALERT_REPEAT_INTERVAL_MS"] = 1000
    alert_rule_update(name="stuck", repeat_interval_s=0)
    for seconds in range(1, 10):
        tick(pending_tx.born_timestamp + seconds * 1000)

    assert announced(hook) == [("firing", "stuck", "G")]


def test_the_default_repeat_interval_is_the_setting(pending_tx, hook, broker_settings):
    broker_settings["HALFMOON_ALERT_REPEAT_INTERVAL_MS"] = 5000
    for seconds in (1, 3, 6, 8, 11):
        tick(pending_tx.born_timestamp + seconds * 1000)

    assert [n.event for n in AlertNotification.objects.order_by("id")] == [
        "firing",
        "reminder",
        "reminder",
    ]


def test_the_evaluation_only_queues_and_delivery_sends(pending_tx, hook):
    alerts_evaluate(now=pending_tx.born_timestamp + 1000)

    assert hook.received() == []
    (queued,) = AlertNotification.objects.all()
    assert (queued.state, queued.attempts, queued.event) == ("pending", 0, "firing")

    assert notifications_deliver().sent == 1
    assert len(hook.received()) == 1
    queued.refresh_from_db()
    assert (queued.state, queued.attempts, queued.last_error) == ("sent", 1, "")
    assert queued.sent_timestamp is not None


def _wait_due(notification: AlertNotification) -> None:
    """Sleep until ``notification`` is due again (its backoff)."""
    notification.refresh_from_db()
    time.sleep(max(0, notification.next_attempt_timestamp - now_ms()) / 1000 + 0.01)


def test_an_undelivered_notification_is_retried_until_the_receiver_answers(
    pending_tx, broker_settings
):
    broker_settings["HALFMOON_ALERT_NOTIFY_BACKOFF_MS"] = 100
    answers: list[int] = [500, 503]
    with check_server_running(
        answer=lambda body: (answers.pop(0) if answers else 200, {"ok": True})
    ) as server:
        receiver_create(name="flaky", kind="alertmanager", url=server.url)
        alerts_evaluate(now=pending_tx.born_timestamp + 1000)
        notification = AlertNotification.objects.get()

        report = notifications_deliver()
        assert (report.sent, report.retrying) == (0, 1)
        notification.refresh_from_db()
        assert (notification.state, notification.attempts) == ("pending", 1)
        assert notification.last_error.startswith("HTTP 500")
        assert notifications_deliver().sent == 0  # not due yet: backing off

        _wait_due(notification)
        notifications_deliver()
        notification.refresh_from_db()
        assert (notification.attempts, notification.last_error[:8]) == (2, "HTTP 503")

        _wait_due(notification)
        assert notifications_deliver().sent == 1
        notification.refresh_from_db()
        assert (notification.state, notification.attempts, notification.last_error) == (
            "sent",
            3,
            "",
        )
        # The same body each time, signed each time.
        bodies = [r.raw for r in server.received()]
        assert len(bodies) == 3 and len(set(bodies)) == 1


def test_a_notification_fails_for_good_after_the_max_attempts_and_is_shown(
    pending_tx, broker_settings, client: Client
):
    broker_settings["HALFMOON_ALERT_NOTIFY_BACKOFF_MS"] = 100
    broker_settings["HALFMOON_ALERT_NOTIFY_MAX_ATTEMPTS"] = 2
    receiver_create(name="gone", kind="alertmanager", url=closed_port_url())
    alerts_evaluate(now=pending_tx.born_timestamp + 1000)
    notification = AlertNotification.objects.get()

    notifications_deliver()
    _wait_due(notification)
    report = notifications_deliver()

    notification.refresh_from_db()
    assert report.failed == 1
    assert (notification.state, notification.attempts) == ("failed", 2)
    assert "ConnectError" in notification.last_error
    signed_in(client, "viewer")
    page = client.get("/console/alerts/").content.decode()
    assert f'id="notification-{notification.pk}"' in page
    assert "ConnectError" in page
    # The banner on every page says so.
    assert (
        "1 notification could not be delivered" in client.get("/console/topics/").content.decode()
    )

    retried = notification_retry(notification_id=notification.pk)
    assert (retried.state, retried.attempts) == ("pending", 0)


def test_a_retried_notification_is_delivered_once_the_receiver_is_back(pending_tx, broker_settings):
    broker_settings["HALFMOON_ALERT_NOTIFY_MAX_ATTEMPTS"] = 1
    with check_server_running(answer=lambda body: (200, {})) as server:
        receiver = receiver_create(name="back", kind="alertmanager", url=closed_port_url())
        alerts_evaluate(now=pending_tx.born_timestamp + 1000)
        notifications_deliver()
        notification = AlertNotification.objects.get()
        assert notification.state == "failed"

        AlertReceiver.objects.filter(pk=receiver.pk).update(url=server.url)  # fixed
        notification_retry(notification_id=notification.pk)
        assert notifications_deliver().sent == 1

    assert len(server.received()) == 1


def test_a_slow_receiver_times_out_and_is_retried(pending_tx, broker_settings):
    broker_settings["HALFMOON_ALERT_NOTIFY_TIMEOUT_MS"] = 300

    released = threading.Event()

    def slow(body: object) -> tuple[int, dict]:
        released.wait(60)  # answers (200) only once the delivery gave up, or after a minute
        return 200, {}

    with check_server_running(answer=slow) as server:
        receiver_create(name="slow", kind="alertmanager", url=server.url)
        alerts_evaluate(now=pending_tx.born_timestamp + 1000)
        report = notifications_deliver()
        released.set()

    assert report.retrying == 1
    assert "Timeout" in AlertNotification.objects.get().last_error


def test_a_slack_receiver_gets_a_slack_message_signed_with_its_secret(pending_tx):
    with check_server_running(answer=lambda body: (200, "ok")) as server:
        receiver = receiver_create(name="slack", kind="slack", url=server.url)
        tick(pending_tx.born_timestamp + 1000)
        transaction_end(transaction_id=pending_tx.pk, producer_group="G", action="commit")
        tick(pending_tx.born_timestamp + 2000)

    firing, resolved = server.received()
    assert firing.headers["X-Halfmoon-Signature"] == expected_signature(receiver.secret, firing.raw)
    assert firing.body["text"].startswith("[FIRING] stuck (warning) on producer group G: 1 pending")
    attachment = firing.body["attachments"][0]
    assert attachment["color"] == "#d63232"
    assert attachment["title_link"].endswith(f"/console/alerts/{Alert.objects.get().pk}/")
    assert {"title": "producer_group", "value": "G", "short": True} in attachment["fields"]
    assert resolved.body["text"].startswith("[RESOLVED] stuck (warning) on producer group G")
    assert resolved.body["attachments"][0]["color"] == "#2eb67d"


def test_an_email_receiver_gets_a_mail_through_djangos_mail(pending_tx, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    receiver_create(name="oncall", kind="email", emails=["ops@example.com", "lead@example.com"])
    tick(pending_tx.born_timestamp + 1000)

    (message,) = mail.outbox
    assert message.to == ["ops@example.com", "lead@example.com"]
    assert message.subject.startswith("[FIRING] stuck (warning) on producer group G: 1 pending")
    assert "Runbook: docs/alerts.md#oldest-pending-transaction-too-old" in message.body
    assert AlertNotification.objects.get().state == "sent"


def test_an_email_that_cannot_be_sent_is_retried(pending_tx, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = int(closed_port_url().rsplit(":", 1)[1].split("/")[0])
    receiver_create(name="oncall", kind="email", emails=["ops@example.com"])
    tick(pending_tx.born_timestamp + 1000)

    notification = AlertNotification.objects.get()
    assert (notification.state, notification.attempts) == ("pending", 1)
    assert "ConnectionRefusedError" in notification.last_error


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://169.254.169.254/latest/meta-data", "link_local"),
        ("http://8.8.8.8/hook", "not_allowed"),
        ("http://127.0.0.1:8000/api/v1/topics", "broker_itself"),
        ("ftp://127.0.0.1/hook", "scheme"),
        ("http://224.0.0.1/hook", "multicast"),
    ],
)
def test_a_webhook_url_is_judged_by_the_check_target_rule(db, url, rule):
    with pytest.raises(InvalidInput) as refused:
        receiver_create(name="bad", kind="slack", url=url)

    assert refused.value.code == "webhook_url_not_allowed"
    assert refused.value.details["rule"] == rule
    assert not AlertReceiver.objects.exists()


def test_the_webhook_list_is_its_own_setting(db, settings):
    settings.HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS = ["8.8.8.0/24"]

    assert receiver_create(name="public", kind="slack", url="http://8.8.8.8/hook").url
    with pytest.raises(InvalidInput) as refused:
        receiver_create(name="local", kind="slack", url="http://127.0.0.1:9/hook")
    assert "HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS" in refused.value.message
    # The check URLs keep their own list.
    producer_group_create(name="P", check_url="http://127.0.0.1:9/check")


def test_a_webhook_refused_when_sent_is_not_sent(pending_tx, hook, settings):
    settings.HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8"]  # not 127.0.0.1 any more
    tick(pending_tx.born_timestamp + 1000)

    assert hook.received() == []
    notification = AlertNotification.objects.get()
    assert notification.state == "pending"
    assert "outside the networks a webhook may reach" in notification.last_error


def test_a_deleted_receivers_pending_notifications_fail_visibly(pending_tx, hook):
    alerts_evaluate(now=pending_tx.born_timestamp + 1000)

    assert receiver_delete(name="hook") == 1

    notification = AlertNotification.objects.get()
    assert (notification.state, notification.last_error) == ("failed", "the receiver was deleted")
    assert notifications_deliver().sent == 0


def test_a_disabled_receiver_gets_nothing_new(pending_tx, hook):
    AlertReceiver.objects.update(enabled=False)
    tick(pending_tx.born_timestamp + 1000)

    assert hook.received() == []
    assert not AlertNotification.objects.exists()
    assert Alert.objects.get().state == "firing"


@pytest.mark.parametrize(
    "stop",
    [
        lambda: alert_rule_update(name="stuck", enabled=False),
        lambda: alert_rule_update(name="stuck", threshold=3600),
        lambda: alert_rule_update(name="stuck", group="H"),
    ],
    ids=["disabled", "threshold", "other-group"],
)
def test_a_change_that_stops_a_rule_resolves_its_alert_once(
    pending_tx, hook, stop: Callable[[], object]
):
    producer_group_create(name="H", check_url=None)
    tick(pending_tx.born_timestamp + 1000)

    stop()
    tick(pending_tx.born_timestamp + 2000)
    tick(pending_tx.born_timestamp + 3000)

    assert announced(hook) == [("firing", "stuck", "G"), ("resolved", "stuck", "G")]


def test_a_rule_that_fires_again_is_a_new_alert_notified_again(pending_tx, hook):
    tick(pending_tx.born_timestamp + 1000)
    transaction_end(transaction_id=pending_tx.pk, producer_group="G", action="commit")
    tick(pending_tx.born_timestamp + 2000)
    again = prepare()
    tick(again.born_timestamp + 1000)

    assert announced(hook) == [
        ("firing", "stuck", "G"),
        ("resolved", "stuck", "G"),
        ("firing", "stuck", "G"),
    ]
    assert list(Alert.objects.order_by("id").values_list("state", flat=True)) == [
        "resolved",
        "firing",
    ]


def test_every_enabled_receiver_gets_each_notification(pending_tx, hook):
    with check_server_running(answer=lambda body: (200, "ok")) as second:
        receiver_create(name="second", kind="slack", url=second.url)
        tick(pending_tx.born_timestamp + 1000)

    assert len(hook.received()) == len(second.received()) == 1
    assert AlertRule.objects.get().alerts.get().notifications.count() == 2

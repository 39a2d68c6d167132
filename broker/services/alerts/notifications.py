"""Notifications of Halfmoon's own alerts: queued in the database with the alert change they
announce, delivered after the commit, retried until delivered or failed for good, never lost
silently.

More: docs/design.md, "Module notes", broker/services/alerts/notifications.py."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction

from broker.conf import conf
from broker.errors import Conflict, NotFound
from broker.models import Alert, AlertNotification, AlertReceiver, AlertRule
from broker.rules.alert_payloads import (
    AlertSnapshot,
    alert_labels,
    alertmanager_body,
    email_text,
    fingerprint,
    slack_body,
)
from broker.rules.alerts import KINDS, AlertKind, NotificationEvent
from broker.rules.checks import backoff_ms
from broker.rules.clock import now_ms
from broker.services.alerts.webhooks import Webhook, WebhookResult, webhooks_send

logger = logging.getLogger("halfmoon.alerts")

BACKOFF_CAP_MS = 600_000
"""The longest wait between two attempts of one notification (10 minutes)."""

CLAIM_BATCH = 100
"""Notifications claimed per delivery pass."""


def alert_snapshot(
    alert: Alert, *, rule: AlertRule | None, event: NotificationEvent, now: int
) -> AlertSnapshot:
    """``alert`` as a notification of ``event`` describes it at ``now`` (ms): its labels
    (``broker.rules.alert_payloads.alert_labels``), summary, the rule's description (or the
    kind's title and threshold), the runbook section and the console page of the alert."""
    kind = AlertKind(alert.kind)
    spec = KINDS[kind]
    labels = alert_labels(
        rule=alert.rule_name,
        kind=alert.kind,
        severity=alert.severity,
        subject_label=alert.subject_label,
        subject=alert.subject,
    )
    if rule is not None and rule.description:
        description = rule.description
    elif rule is not None:
        window = f" over {rule.window_s} s" if spec.uses_window else ""
        description = f"{spec.title}: threshold {rule.threshold} {spec.threshold_unit}{window}."
    else:
        description = f"{spec.title} (the rule was deleted)."
    resolved = event == NotificationEvent.RESOLVED
    return AlertSnapshot(
        status="resolved" if resolved else "firing",
        event=str(event),
        labels=labels,
        annotations={
            "summary": alert.summary,
            "description": description,
            "runbook_url": spec.runbook_url,
        },
        starts_at=alert.started_timestamp,
        ends_at=(alert.resolved_timestamp or now) if resolved else None,
        generator_url=f"{settings.HALFMOON_CONSOLE_URL}/console/alerts/{alert.pk}/",
        fingerprint=fingerprint(labels),
    )


def notifications_queue(
    alert: Alert, *, rule: AlertRule | None, event: NotificationEvent, now: int
) -> Counter[str]:
    """Queue one notification of ``event`` for ``alert`` per enabled receiver, inside the
    caller's database transaction, due at once (on the clock: ``now``, ms, is the evaluation's
    time, which the snapshot describes). Returns the count queued, by event."""
    payload = alert_snapshot(alert, rule=rule, event=event, now=now).as_dict()
    receivers = list(AlertReceiver.objects.filter(enabled=True).order_by("name"))
    queued_at = now_ms()
    AlertNotification.objects.bulk_create(
        [
            AlertNotification(
                alert=alert,
                receiver=receiver,
                receiver_name=receiver.name,
                event=event,
                payload=payload,
                next_attempt_timestamp=queued_at,
                created_timestamp=queued_at,
            )
            for receiver in receivers
        ]
    )
    return Counter({str(event): len(receivers)})


@dataclass
class DeliveryReport:
    """What one delivery pass did: notifications ``sent``, ``retrying`` (due again later) and
    ``failed`` (for good)."""

    sent: int = 0
    retrying: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """The report as plain values."""
        return {"sent": self.sent, "retrying": self.retrying, "failed": self.failed}


def _lease_ms() -> int:
    """How long a claimed notification is kept from other workers: two timeouts and a second."""
    return 2 * conf.alert_notify_timeout_ms + 1000


def _claim(now: int, limit: int) -> list[AlertNotification]:
    """Claim up to ``limit`` due pending notifications (oldest due first): one attempt more
    each, next attempt a lease ahead. One short transaction."""
    with transaction.atomic():
        due = list(
            AlertNotification.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(state=AlertNotification.State.PENDING, next_attempt_timestamp__lte=now)
            .select_related("receiver")
            .order_by("next_attempt_timestamp", "pk")[:limit]
        )
        for notification in due:
            notification.attempts += 1
            notification.next_attempt_timestamp = now + _lease_ms()
        AlertNotification.objects.bulk_update(due, ["attempts", "next_attempt_timestamp"])
    return due


def webhook_of(notification: AlertNotification) -> Webhook:
    """The signed POST of a webhook notification: the receiver's body format (Alertmanager's
    webhook or Slack's) of its frozen snapshot."""
    receiver = notification.receiver
    assert receiver is not None
    snapshot = AlertSnapshot.from_dict(notification.payload)
    if receiver.kind == AlertReceiver.Kind.SLACK:
        body = slack_body(snapshot)
    else:
        body = alertmanager_body(
            snapshot, receiver=receiver.name, external_url=settings.HALFMOON_CONSOLE_URL
        )
    return Webhook(key=notification.pk, url=receiver.url, secret=receiver.secret, body=body)


def _email_send(notification: AlertNotification) -> str:
    """Send an e-mail notification through Django's mail (SMTP timeout:
    HALFMOON_ALERT_NOTIFY_TIMEOUT_MS). Returns "" when sent, else the error."""
    receiver = notification.receiver
    assert receiver is not None
    subject, body = email_text(AlertSnapshot.from_dict(notification.payload))
    try:
        connection = get_connection(timeout=conf.alert_notify_timeout_ms / 1000)
        EmailMessage(subject, body, to=list(receiver.emails), connection=connection).send()
    except Exception as exc:  # noqa: BLE001 - any failure of the mail backend is retried
        return f"{type(exc).__name__}: {exc}"
    return ""


def notifications_deliver(*, now: int | None = None, limit: int = CLAIM_BATCH) -> DeliveryReport:
    """Deliver the due notifications (see the module docstring), at most ``limit`` per pass,
    passes until none is due. Call outside any database transaction: the sends are slow I/O.
    Returns what was delivered."""
    report = DeliveryReport()
    while True:
        start = now_ms() if now is None else now
        claimed = _claim(start, limit)
        if not claimed:
            return report
        errors: dict[int, str] = {}
        webhooks: list[Webhook] = []
        for notification in claimed:
            receiver = notification.receiver
            if receiver is None:
                errors[notification.pk] = "the receiver was deleted"
            elif not receiver.enabled:
                errors[notification.pk] = "the receiver is disabled"
            elif receiver.kind == AlertReceiver.Kind.EMAIL:
                errors[notification.pk] = _email_send(notification)
            else:
                webhooks.append(webhook_of(notification))
        results: list[WebhookResult] = webhooks_send(webhooks) if webhooks else []
        errors.update({result.key: result.error for result in results})
        for notification in claimed:
            _record(notification, errors.get(notification.pk, ""), report)
        if len(claimed) < limit:
            return report


def _record(notification: AlertNotification, error: str, report: DeliveryReport) -> None:
    """Record one attempt's result (``error`` "": delivered) in a transaction of its own."""
    now = now_ms()
    gone = error in ("the receiver was deleted", "the receiver is disabled")
    with transaction.atomic():
        row = AlertNotification.objects.select_for_update().get(pk=notification.pk)
        if row.state != AlertNotification.State.PENDING:
            return  # recorded meanwhile (a retry by an operator after a lost lease)
        if not error:
            row.state = AlertNotification.State.SENT
            row.sent_timestamp = now
            row.last_error = ""
            report.sent += 1
        elif gone or row.attempts >= conf.alert_notify_max_attempts:
            row.state = AlertNotification.State.FAILED
            row.last_error = error[:1024]
            report.failed += 1
        else:
            row.last_error = error[:1024]
            row.next_attempt_timestamp = now + backoff_ms(
                row.attempts, base_ms=conf.alert_notify_backoff_ms, cap_ms=BACKOFF_CAP_MS
            )
            report.retrying += 1
        row.save(update_fields=["state", "sent_timestamp", "last_error", "next_attempt_timestamp"])
    if error:
        report.errors.append(error)
        log = logger.error if row.state == AlertNotification.State.FAILED else logger.warning
        log(
            "alert notification %s to %s, attempt %d: %s (%s)",
            row.pk,
            row.receiver_name,
            row.attempts,
            error,
            row.state,
        )


def notification_retry(*, notification_id: int) -> AlertNotification:
    """Put the failed notification ``notification_id`` back to ``pending``, due now, with its
    attempts counted from 0 again (its last error is kept until the next attempt).

    Raises:
        NotFound: ``alert_notification_not_found``. Conflict: ``notification_not_failed``.
    """
    with transaction.atomic():
        row = AlertNotification.objects.select_for_update().filter(pk=notification_id).first()
        if row is None:
            raise NotFound(
                f"Notification {notification_id} does not exist.",
                code="alert_notification_not_found",
                details={"id": notification_id},
            )
        if row.state != AlertNotification.State.FAILED:
            raise Conflict(
                f"Notification {notification_id} is {row.state}, not failed.",
                code="notification_not_failed",
                details={"id": notification_id, "state": row.state},
            )
        row.state = AlertNotification.State.PENDING
        row.attempts = 0
        row.next_attempt_timestamp = now_ms()
        row.save(update_fields=["state", "attempts", "next_attempt_timestamp"])
    return row

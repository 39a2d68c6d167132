"""Halfmoon's own alerts (``broker.services.alerts``; the rules in ``broker.rules.alerts``): rules, receivers, silences, alerts and their notifications."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from broker.models.audit import AuditEntry
from broker.rules.alerts import AlertKind, AlertSeverity, NotificationEvent
from broker.rules.clock import now_ms

# --- Alerts (broker.services.alerts; the rules in broker.rules.alerts) ---------------------------


class AlertRule(models.Model):
    """One of Halfmoon's own alert rules: a ``kind`` (``broker.rules.alerts.KINDS``) watched on
    one group (``group``) or on every group (``group`` ""), firing past ``threshold`` (in the
    kind's unit: seconds, checks left, discards per hour, messages) over ``window_s`` seconds
    where the kind has a window. ``repeat_interval_s``: the reminder interval while an alert
    fires (None: HALFMOON_ALERT_REPEAT_INTERVAL_MS; 0: no reminders). Written through
    ``broker.services.alerts.rules`` only."""

    Kind = AlertKind
    Severity = AlertSeverity

    name = models.CharField(max_length=127, unique=True)
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    group = models.CharField(
        max_length=127, blank=True, default="", help_text="One group, or empty for every group"
    )
    threshold = models.BigIntegerField()
    window_s = models.PositiveIntegerField(default=3600)
    severity = models.CharField(
        max_length=16, choices=AlertSeverity.choices, default=AlertSeverity.WARNING
    )
    repeat_interval_s = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="")
    created_timestamp = models.BigIntegerField(default=now_ms)
    updated_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=AlertKind.values), name="alert_rule_kind_valid"
            ),
            models.CheckConstraint(condition=Q(threshold__gte=0), name="alert_rule_threshold"),
        ]

    def __str__(self) -> str:
        return self.name


class AlertReceiver(models.Model):
    """Where notifications go: a webhook whose body is Alertmanager's (``alertmanager``) or a
    Slack message (``slack``), signed with ``secret`` as back-checks are
    (``X-Halfmoon-Signature``), or e-mail to ``emails`` through Django's mail settings. Every
    enabled receiver gets every notification. Written through
    ``broker.services.alerts.receivers`` only."""

    class Kind(models.TextChoices):
        ALERTMANAGER = "alertmanager"
        SLACK = "slack"
        EMAIL = "email"

    name = models.CharField(max_length=127, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    url = models.URLField(max_length=2048, blank=True, default="")
    emails = models.JSONField(default=list, blank=True)
    secret = models.CharField(max_length=128, help_text="HMAC-SHA256 key of the signature")
    enabled = models.BooleanField(default=True)
    created_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertSilence(models.Model):
    """No notifications of ``rule``'s alerts on ``group`` ("" = every group of the rule) from
    ``starts_timestamp`` until ``ends_timestamp`` (ms): set by an operator with a reason, in the
    audit log (``audit_entry``); ended early by ``expired_by``."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="silences")
    group = models.CharField(max_length=127, blank=True, default="")
    starts_timestamp = models.BigIntegerField(default=now_ms)
    ends_timestamp = models.BigIntegerField()
    reason = models.TextField()
    created_by = models.CharField(max_length=160)
    audit_entry = models.ForeignKey(
        AuditEntry, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    expired_by = models.CharField(max_length=160, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["rule", "ends_timestamp"], name="alert_silence_rule_end")]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.group or '*'} until {self.ends_timestamp}"


class Alert(models.Model):
    """One alert: a rule firing on one group (``subject``, a producer or consumer group as
    ``subject_label`` says) from ``started_timestamp`` until ``resolved_timestamp``. At most
    one firing alert per rule and group; a rule that fires again later makes a new row.
    ``value`` and ``summary``: what the last evaluation saw. ``notified``: a firing
    notification went out (so the resolution is notified too); ``last_notified_timestamp``:
    the last firing or reminder notification. The rule's name, kind and severity are copied,
    so the history outlives a deleted rule."""

    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    rule = models.ForeignKey(
        AlertRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    rule_name = models.CharField(max_length=127)
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    severity = models.CharField(max_length=16, choices=AlertSeverity.choices)
    subject_label = models.CharField(max_length=16)
    subject = models.CharField(max_length=127)
    state = models.CharField(max_length=16, choices=State.choices, default=State.FIRING)
    value = models.FloatField(default=0.0)
    summary = models.CharField(max_length=512, blank=True, default="")
    started_timestamp = models.BigIntegerField(default=now_ms)
    evaluated_timestamp = models.BigIntegerField(default=now_ms)
    resolved_timestamp = models.BigIntegerField(null=True, blank=True)
    notified = models.BooleanField(default=False)
    last_notified_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state="firing"),
                name="one_firing_alert_per_rule_group",
            )
        ]
        indexes = [
            # The console's banner and the evaluation read the firing ones.
            models.Index(
                fields=["started_timestamp"], condition=Q(state="firing"), name="alert_firing"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule_name} on {self.subject} ({self.state})"


class AlertNotification(models.Model):
    """One notification of one alert to one receiver: ``event`` (firing, reminder, resolved),
    its content frozen when queued (``payload``: a ``broker.rules.alert_payloads.AlertSnapshot``)
    and its delivery: ``pending`` (due at ``next_attempt_timestamp``), ``sent``, or ``failed``
    after HALFMOON_ALERT_NOTIFY_MAX_ATTEMPTS attempts with ``last_error``. Never deleted; a
    failed one is shown in the console and may be retried from there."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    alert = models.ForeignKey(Alert, on_delete=models.PROTECT, related_name="notifications")
    receiver = models.ForeignKey(
        AlertReceiver, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    receiver_name = models.CharField(max_length=127)
    event = models.CharField(max_length=16, choices=NotificationEvent.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    payload = models.JSONField(default=dict)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_timestamp = models.BigIntegerField(default=now_ms)
    last_error = models.CharField(max_length=1024, blank=True, default="")
    created_timestamp = models.BigIntegerField(default=now_ms)
    sent_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The delivery claims the due pending ones.
            models.Index(
                fields=["next_attempt_timestamp"],
                condition=Q(state="pending"),
                name="alert_notification_due",
            ),
            models.Index(fields=["state", "-id"], name="alert_notification_state"),
        ]

    def __str__(self) -> str:
        return f"{self.event} of {self.alert_id} to {self.receiver_name} ({self.state})"

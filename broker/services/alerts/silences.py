"""Silences: an operator stops the notifications of one rule's alerts on one group (or every
group of the rule) for a time, with a reason. Each silence, and each one ended early, is an
entry of the operators' audit log (``broker.services.operations.audit``), written in the same database
transaction as the silence itself.

A silence suppresses firing notifications and reminders while it lasts; a resolution whose
firing notification went out is still notified, and an alert still firing, never notified,
when its silence ends is notified then (``broker.rules.alerts.alert_step``)."""

from __future__ import annotations

from django.db import transaction

from broker.errors import Conflict, InvalidInput, NotFound, silence_not_found
from broker.models import Alert, AlertSilence, AuditEntry
from broker.rules.audit import iso_utc
from broker.rules.clock import now_ms
from broker.rules.durations import duration_text
from broker.services.operations.audit import actor_checked, audit_entry_record, reason_checked

SILENCE_MAX_S = 30 * 86_400
"""Longest silence (30 days)."""


def alert_silence(
    *, alert_id: int, duration_s: int, reason: str, actor: str, via: str = AuditEntry.Via.CONSOLE
) -> AlertSilence:
    """Silence the rule of alert ``alert_id`` on that alert's group for ``duration_s`` seconds
    from now, audited (action ``silence-alert``, with the rule, group and end in its scope).

    Raises:
        NotFound: ``alert_not_found``. Conflict: ``alert_rule_deleted`` (the alert's rule is
            gone: nothing to silence). InvalidInput: ``reason_required``, ``reason_too_long``,
            ``invalid_duration_s`` (not 1..``SILENCE_MAX_S``).
    """
    reason = reason_checked(reason)
    actor_checked(actor)
    if not 1 <= duration_s <= SILENCE_MAX_S:
        raise InvalidInput(
            f"A silence lasts 1 to {SILENCE_MAX_S} seconds.",
            code="invalid_duration_s",
            details={"field": "duration_s"},
        )
    now = now_ms()
    with transaction.atomic():
        alert = Alert.objects.select_related("rule").filter(pk=alert_id).first()
        if alert is None:
            raise NotFound(
                f"Alert {alert_id} does not exist.",
                code="alert_not_found",
                details={"id": alert_id},
            )
        if alert.rule is None:
            raise Conflict(
                f"The rule of alert {alert_id} ({alert.rule_name}) was deleted.",
                code="alert_rule_deleted",
                details={"id": alert_id, "rule": alert.rule_name},
            )
        ends = now + duration_s * 1000
        entry = audit_entry_record(
            action=AuditEntry.Action.SILENCE_ALERT,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=f"silenced {alert.rule_name} on {alert.subject} for "
            f"{duration_text(duration_s * 1000)}, until {iso_utc(ends)}",
            targets={},
            scope={
                "alert_id": alert.pk,
                "rule": alert.rule_name,
                "group": alert.subject,
                "until": ends,
            },
        )
        return AlertSilence.objects.create(
            rule=alert.rule,
            group=alert.subject,
            starts_timestamp=now,
            ends_timestamp=ends,
            reason=reason,
            created_by=actor,
            audit_entry=entry,
        )


def alert_silence_expire(
    *, silence_id: int, reason: str, actor: str, via: str = AuditEntry.Via.CONSOLE
) -> AlertSilence:
    """End the silence ``silence_id`` now, audited (action ``expire-silence``); the next
    evaluation notifies what it held back and still fires.

    Raises:
        NotFound: ``alert_silence_not_found``. Conflict: ``silence_over`` (already ended).
        InvalidInput: ``reason_required``, ``reason_too_long``.
    """
    reason = reason_checked(reason)
    actor_checked(actor)
    now = now_ms()
    with transaction.atomic():
        silence = (
            AlertSilence.objects.select_for_update()
            .select_related("rule")
            .filter(pk=silence_id)
            .first()
        )
        if silence is None:
            raise silence_not_found(silence_id)
        if silence.ends_timestamp <= now:
            raise Conflict(
                f"Silence {silence_id} is over.", code="silence_over", details={"id": silence_id}
            )
        audit_entry_record(
            action=AuditEntry.Action.EXPIRE_SILENCE,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=f"ended the silence of {silence.rule.name} on {silence.group or 'every group'} "
            f"(set by {silence.created_by}, until {iso_utc(silence.ends_timestamp)})",
            targets={},
            scope={"silence_id": silence.pk, "rule": silence.rule.name, "group": silence.group},
        )
        silence.ends_timestamp = now
        silence.expired_by = actor
        silence.save(update_fields=["ends_timestamp", "expired_by"])
    return silence

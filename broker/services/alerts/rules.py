"""Alert rules: every write of an ``AlertRule`` (the API, the console, the Django admin) goes
through here, so a rule is valid whatever the caller. The ``*_validate`` functions are the
same checks on their own, for forms that report errors before anything is written.

A rule deleted or disabled stops firing: its firing alerts are resolved (by the deletion at
once, by the next evaluation for a disabled rule), with a resolved notification wherever a
firing one went out (``broker.services.alerts.evaluation``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from broker.errors import InvalidInput, not_found
from broker.models import Alert, AlertRule, ConsumerGroup, ProducerGroup, Topic
from broker.rules.alerts import (
    KINDS,
    THRESHOLD_MAX,
    WINDOW_S_MAX,
    WINDOW_S_MIN,
    AlertKind,
    AlertSeverity,
    Subject,
)
from broker.rules.clock import now_ms
from broker.services.topology.writes import created_once, name_validate

REPEAT_INTERVAL_S_MAX = 30 * 86_400
"""Longest reminder interval a rule may set (30 days)."""

DESCRIPTION_MAX_LENGTH = 1024

# The fields a change may set (``alert_rule_update``); ``name`` and ``kind`` are fixed.
CHANGEABLE = (
    "group",
    "threshold",
    "window_s",
    "severity",
    "repeat_interval_s",
    "enabled",
    "description",
)


def alert_kind_validate(kind: str) -> AlertKind:
    """``kind`` as an ``AlertKind``.

    Raises:
        InvalidInput: ``invalid_alert_kind`` (not one of ``broker.rules.alerts.KINDS``).
    """
    if kind not in AlertKind.values:
        raise InvalidInput(
            f"kind must be one of {', '.join(AlertKind.values)}.",
            code="invalid_alert_kind",
            details={"field": "kind"},
        )
    return AlertKind(kind)


def _bounded(field: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidInput(
            f"{field} must be between {low} and {high}.",
            code=f"invalid_{field}",
            details={"field": field, "minimum": low, "maximum": high},
        )


def alert_rule_values_validate(kind: AlertKind, values: dict[str, Any]) -> None:
    """Check the values of a rule of ``kind`` (the keys of ``CHANGEABLE`` present in
    ``values``): ``group`` "" or the name of an existing producer group (consumer group for
    ``dlq_growing`` and ``fifo_blocked``, topic for ``scheduled_overdue``), ``threshold``
    0..``THRESHOLD_MAX``, ``window_s``
    ``WINDOW_S_MIN``..``WINDOW_S_MAX`` seconds, ``severity`` an ``AlertSeverity``,
    ``repeat_interval_s`` None or 0..``REPEAT_INTERVAL_S_MAX`` seconds, ``description`` at most
    ``DESCRIPTION_MAX_LENGTH`` characters.

    Raises:
        InvalidInput: ``invalid_name`` (group), ``invalid_threshold``, ``invalid_window_s``,
            ``invalid_severity``, ``invalid_repeat_interval_s``, ``invalid_description``.
        NotFound: ``producer_group_not_found`` / ``consumer_group_not_found`` /
            ``topic_not_found``.
    """
    group = values.get("group") or ""
    if group:
        name_validate("group", group)
        if KINDS[kind].subject == Subject.CONSUMER_GROUP:
            if not ConsumerGroup.objects.filter(name=group).exists():
                raise not_found("consumer_group", group)
        elif KINDS[kind].subject == Subject.TOPIC:
            if not Topic.objects.filter(name=group).exists():
                raise not_found("topic", group)
        elif not ProducerGroup.objects.filter(name=group).exists():
            raise not_found("producer_group", group)
    if "threshold" in values:
        _bounded("threshold", values["threshold"], 0, THRESHOLD_MAX)
    if "window_s" in values:
        _bounded("window_s", values["window_s"], WINDOW_S_MIN, WINDOW_S_MAX)
    if "severity" in values and values["severity"] not in AlertSeverity.values:
        raise InvalidInput(
            f"severity must be one of {', '.join(AlertSeverity.values)}.",
            code="invalid_severity",
            details={"field": "severity"},
        )
    if values.get("repeat_interval_s") is not None:
        _bounded("repeat_interval_s", values["repeat_interval_s"], 0, REPEAT_INTERVAL_S_MAX)
    if len(values.get("description") or "") > DESCRIPTION_MAX_LENGTH:
        raise InvalidInput(
            f"description may be at most {DESCRIPTION_MAX_LENGTH} characters.",
            code="invalid_description",
            details={"field": "description"},
        )


def alert_rule_create(
    *,
    name: str,
    kind: str,
    group: str = "",
    threshold: int | None = None,
    window_s: int | None = None,
    severity: str = AlertSeverity.WARNING,
    repeat_interval_s: int | None = None,
    enabled: bool = True,
    description: str = "",
) -> AlertRule:
    """Create an alert rule. ``threshold`` and ``window_s`` default to the kind's
    (``broker.rules.alerts.KINDS``); ``group`` "" watches every group; ``repeat_interval_s``
    None reminds every HALFMOON_ALERT_REPEAT_INTERVAL_MS, 0 never.

    Raises:
        InvalidInput: ``invalid_name``, ``invalid_alert_kind`` and those of
            ``alert_rule_values_validate``. NotFound: an unknown group.
        Conflict: ``alert_rule_exists``.
    """
    name_validate("alert rule", name)
    alert_kind = alert_kind_validate(kind)
    spec = KINDS[alert_kind]
    values = {
        "group": group or "",
        "threshold": spec.default_threshold if threshold is None else threshold,
        "window_s": (spec.default_window_s or 3600) if window_s is None else window_s,
        "severity": severity,
        "repeat_interval_s": repeat_interval_s,
        "enabled": enabled,
        "description": description or "",
    }
    alert_rule_values_validate(alert_kind, values)
    with created_once("alert_rule", name):
        return AlertRule.objects.create(name=name, kind=alert_kind, **values)


def alert_rule_update(*, name: str, **changes: Any) -> AlertRule:
    """Change the rule ``name``: any of ``CHANGEABLE`` (its name and kind are fixed). An alert
    firing on a group the rule no longer watches, or past a threshold no longer crossed,
    resolves at the next evaluation.

    Raises:
        NotFound: ``alert_rule_not_found``. InvalidInput: ``invalid_field`` (a field that
            cannot change) and those of ``alert_rule_values_validate``.
    """
    unknown = sorted(set(changes) - set(CHANGEABLE))
    if unknown:
        raise InvalidInput(
            f"An alert rule's {', '.join(unknown)} cannot be changed.",
            code="invalid_field",
            details={"fields": unknown},
        )
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(name=name).first()
        if rule is None:
            raise not_found("alert_rule", name)
        if "group" in changes:
            changes["group"] = changes["group"] or ""
        if "description" in changes:
            changes["description"] = changes["description"] or ""
        alert_rule_values_validate(AlertKind(rule.kind), changes)
        for field, value in changes.items():
            setattr(rule, field, value)
        rule.updated_timestamp = now_ms()
        rule.save()
    return rule


def alert_rule_delete(*, name: str) -> None:
    """Delete the rule ``name`` and its silences; its firing alerts are resolved now (a
    resolved notification for each whose firing one went out); the alerts stay in the history
    with the rule's name.

    Raises:
        NotFound: ``alert_rule_not_found``.
    """
    from broker.services.alerts.evaluation import alert_resolve

    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(name=name).first()
        if rule is None:
            raise not_found("alert_rule", name)
        now = now_ms()
        for alert in Alert.objects.select_for_update().filter(rule=rule, state=Alert.State.FIRING):
            alert_resolve(alert, rule=rule, now=now)
        rule.delete()

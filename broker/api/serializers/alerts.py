"""Input validation and output shapes of the alert rules endpoints (``/api/v1/alert-rules``,
an addition to api-v1; ``docs/api.md``). Inputs check form with the strict JSON
fields of ``broker.api.serializers``; the service (``broker.services.alerts.rules``) checks
meaning (the group exists, the kind's defaults)."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    name_validator,
)
from broker.models import AlertRule
from broker.rules.alerts import THRESHOLD_MAX, WINDOW_S_MAX, WINDOW_S_MIN, AlertKind, AlertSeverity
from broker.services.alerts.rules import DESCRIPTION_MAX_LENGTH, REPEAT_INTERVAL_S_MAX

_HELP = {
    "group": "The producer group watched (the consumer group for dlq_growing and fifo_blocked); "
    "empty: every group.",
    "threshold": "Fires past this, in the kind's unit: oldest_pending and group_unreachable "
    "seconds, near_check_max checks left before the check max, discard_rate discards per hour, "
    "dlq_growing messages dead-lettered in the window, fifo_blocked seconds a message group has "
    "been blocked. Default: the kind's (600, 2, 300, 10, 0, 300).",
    "window_s": "discard_rate and dlq_growing: the window measured (seconds; default 3600 and "
    "900). Ignored by the other kinds.",
    "repeat_interval_s": "Reminder interval while an alert fires (seconds); null: "
    "HALFMOON_ALERT_REPEAT_INTERVAL_MS; 0: no reminders.",
}


def _group_field(**kwargs: object) -> serializers.CharField:
    return StrictCharField(
        max_length=127,
        allow_blank=True,
        validators=[name_validator],
        help_text=_HELP["group"],
        **kwargs,
    )


def _threshold_field(**kwargs: object) -> serializers.IntegerField:
    return StrictIntegerField(
        min_value=0, max_value=THRESHOLD_MAX, help_text=_HELP["threshold"], **kwargs
    )


def _window_field(**kwargs: object) -> serializers.IntegerField:
    return StrictIntegerField(
        min_value=WINDOW_S_MIN, max_value=WINDOW_S_MAX, help_text=_HELP["window_s"], **kwargs
    )


def _repeat_field(**kwargs: object) -> serializers.IntegerField:
    return StrictIntegerField(
        min_value=0,
        max_value=REPEAT_INTERVAL_S_MAX,
        allow_null=True,
        help_text=_HELP["repeat_interval_s"],
        **kwargs,
    )


def _description_field(**kwargs: object) -> serializers.CharField:
    return StrictCharField(max_length=DESCRIPTION_MAX_LENGTH, allow_blank=True, **kwargs)


class AlertRuleInSerializer(serializers.Serializer):
    """A new alert rule; the validated data are ``alert_rule_create``'s arguments."""

    name = NameField()
    kind = StrictChoiceField(choices=AlertKind.choices)
    group = _group_field(required=False, default="")
    threshold = _threshold_field(required=False, allow_null=True, default=None)
    window_s = _window_field(required=False, allow_null=True, default=None)
    severity = StrictChoiceField(choices=AlertSeverity.choices, default=AlertSeverity.WARNING)
    repeat_interval_s = _repeat_field(required=False, default=None)
    enabled = StrictBooleanField(required=False, default=True)
    description = _description_field(required=False, default="")


class AlertRulePatchSerializer(serializers.Serializer):
    """A change of an alert rule: any of its changeable fields (its name and kind stay)."""

    group = _group_field(required=False)
    threshold = _threshold_field(required=False)
    window_s = _window_field(required=False)
    severity = StrictChoiceField(choices=AlertSeverity.choices, required=False)
    repeat_interval_s = _repeat_field(required=False)
    enabled = StrictBooleanField(required=False)
    description = _description_field(required=False)


class AlertRuleOutSerializer(serializers.ModelSerializer):
    """An alert rule as stored, with the number of its alerts firing now (``firing``)."""

    firing = serializers.SerializerMethodField()

    class Meta:
        model = AlertRule
        fields = [
            "name",
            "kind",
            "group",
            "threshold",
            "window_s",
            "severity",
            "repeat_interval_s",
            "enabled",
            "description",
            "created_timestamp",
            "updated_timestamp",
            "firing",
        ]

    def get_firing(self, rule: AlertRule) -> int:
        """Alerts of this rule firing now (``firing_count`` when the selector annotated it)."""
        counted = getattr(rule, "firing_count", None)
        if counted is not None:
            return int(counted)
        return rule.alerts.filter(state="firing").count()

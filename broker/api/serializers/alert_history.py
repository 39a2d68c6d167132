"""Query validation and output shapes of the alerts' history endpoints (``/api/v1/alerts``,
``/api/v1/alert-notifications``, additions to api-v1; ``docs/api.md``): the alerts firing or
resolved and their notifications, what the console's alerts page shows."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from broker.api.serializers.fields import QueryIntegerField, StrictChoiceField
from broker.models import Alert, AlertNotification
from broker.selectors.alerts import FiringAlert

ALERT_LIST_MAX = 500
"""The most resolved alerts or notifications one list answers (``limit``)."""


ALERT_STATES = Alert.State.choices
"""An alert's states (``firing``, ``resolved``): the OpenAPI enum ``AlertStateEnum``."""


class AlertQuerySerializer(serializers.Serializer):
    """``GET /api/v1/alerts``: ``state`` firing (default: every firing alert) or resolved (the
    latest ``limit``)."""

    state = StrictChoiceField(choices=Alert.State.choices, required=False, default="firing")
    limit = QueryIntegerField(min_value=1, max_value=ALERT_LIST_MAX, required=False, default=50)


class AlertNotificationQuerySerializer(serializers.Serializer):
    """``GET /api/v1/alert-notifications``: the latest ``limit``, of ``state`` when given."""

    state = StrictChoiceField(choices=AlertNotification.State.choices, required=False)
    limit = QueryIntegerField(min_value=1, max_value=ALERT_LIST_MAX, required=False, default=50)


class AlertOutSerializer(serializers.ModelSerializer):
    """An alert: its rule (name, kind and severity as they were when it fired), the group it
    fires on (``subject``, a ``subject_label`` group), what the last evaluation saw (``value``,
    ``summary``), its times (ms), whether its firing was notified, and the silence holding back
    its notifications now (``silence_id``; null when none or resolved). The silences come in
    the context as ``silences``: alert id -> silence id."""

    silence_id = serializers.SerializerMethodField()

    class Meta:
        model = Alert
        fields = [
            "id",
            "rule_name",
            "kind",
            "severity",
            "subject_label",
            "subject",
            "state",
            "value",
            "summary",
            "started_timestamp",
            "evaluated_timestamp",
            "resolved_timestamp",
            "notified",
            "last_notified_timestamp",
            "silence_id",
        ]

    def get_silence_id(self, alert: Alert) -> int | None:
        """The id of the silence covering the alert now, or None."""
        return self.context.get("silences", {}).get(alert.pk)


def silences_by_alert(rows: list[FiringAlert]) -> dict[int, int]:
    """alert id -> id of the silence covering it, for ``AlertOutSerializer``'s context."""
    return {row.alert.pk: row.silence.pk for row in rows if row.silence is not None}


class AlertNotificationOutSerializer(serializers.ModelSerializer):
    """One notification of one alert to one receiver: its event, delivery state, attempts,
    last error, and times (ms)."""

    class Meta:
        model = AlertNotification
        fields = [
            "id",
            "alert_id",
            "receiver_name",
            "event",
            "state",
            "attempts",
            "next_attempt_timestamp",
            "last_error",
            "created_timestamp",
            "sent_timestamp",
        ]


class AlertDetailOutSerializer(AlertOutSerializer):
    """An alert with every notification of it, oldest first."""

    notifications = serializers.SerializerMethodField()

    class Meta(AlertOutSerializer.Meta):
        fields = [*AlertOutSerializer.Meta.fields, "notifications"]

    @extend_schema_field(AlertNotificationOutSerializer(many=True))
    def get_notifications(self, alert: Alert) -> list[dict]:
        """The alert's notifications (``broker.selectors.alerts.alert_notifications``)."""
        return AlertNotificationOutSerializer(self.context["notifications"], many=True).data

"""The console's forms for alert rules and receivers (admins) and silences (operators).

As the topology forms, they only parse what was typed; every rule (names, kinds, bounds, the
group's existence, the webhook URL's target) is the service's (``broker.services.alerts``),
and a service error comes back on the field it names (``details.field``) or on the form.
"""

from __future__ import annotations

from typing import Any

from django import forms

from broker.models import AlertReceiver
from broker.rules.alerts import (
    KINDS,
    THRESHOLD_MAX,
    WINDOW_S_MAX,
    WINDOW_S_MIN,
    AlertKind,
    AlertSeverity,
)
from broker.services.alerts.rules import DESCRIPTION_MAX_LENGTH, REPEAT_INTERVAL_S_MAX
from broker.services.alerts.silences import SILENCE_MAX_S
from broker.services.operations.audit import REASON_MAX_LENGTH
from console.forms.base import ServiceErrorsForm

# Service error codes whose field is not named in ``details.field``.
ALERT_FIELD_OF_CODE = {
    "invalid_name": "name",
    "alert_rule_exists": "name",
    "alert_receiver_exists": "name",
    "producer_group_not_found": "group",
    "consumer_group_not_found": "group",
    "reason_required": "reason",
    "reason_too_long": "reason",
}


class AlertServiceForm(ServiceErrorsForm):
    """A form that puts a service error on the field its ``details.field`` (or its code)
    names, else on the whole form."""

    field_of_code = ALERT_FIELD_OF_CODE


def _kinds_help() -> str:
    return "; ".join(
        f"{kind}: {spec.title} ({spec.threshold_unit})" for kind, spec in KINDS.items()
    )


class AlertRuleEditForm(AlertServiceForm):
    """What may change in a rule (``alert_rule_update``)."""

    group = forms.CharField(
        required=False,
        max_length=127,
        help_text="A producer group (a consumer group for dlq_growing); empty: every group.",
    )
    threshold = forms.IntegerField(
        min_value=0,
        max_value=THRESHOLD_MAX,
        help_text="In the kind's unit: " + _kinds_help() + ".",
    )
    window_s = forms.IntegerField(
        label="Window (s)",
        min_value=WINDOW_S_MIN,
        max_value=WINDOW_S_MAX,
        help_text="discard_rate and dlq_growing: the window measured, in seconds.",
    )
    severity = forms.ChoiceField(choices=AlertSeverity.choices)
    repeat_interval_s = forms.IntegerField(
        label="Reminder interval (s)",
        required=False,
        min_value=0,
        max_value=REPEAT_INTERVAL_S_MAX,
        help_text="While it fires; empty: HALFMOON_ALERT_REPEAT_INTERVAL_MS; 0: no reminders.",
    )
    enabled = forms.BooleanField(required=False, initial=True)
    description = forms.CharField(
        required=False,
        max_length=DESCRIPTION_MAX_LENGTH,
        widget=forms.Textarea({"rows": 3}),
        help_text="Sent with each notification (what to do, whom to call).",
    )


class AlertRuleCreateForm(AlertRuleEditForm):
    """A new rule (``alert_rule_create``): its name and kind, then what ``AlertRuleEditForm``
    has; an empty threshold or window takes the kind's default."""

    name = forms.CharField(max_length=127, help_text="Letters, digits, %, |, _ and -.")
    kind = forms.ChoiceField(choices=AlertKind.choices)
    field_order = ["name", "kind"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["threshold"].required = False
        self.fields["window_s"].required = False
        self.fields["threshold"].help_text += " Empty: the kind's default."


class ReceiverEditForm(AlertServiceForm):
    """A receiver's target and switch (``receiver_update``)."""

    url = forms.CharField(
        required=False,
        max_length=2048,
        label="URL",
        help_text="Webhooks: where to POST (HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS must allow it).",
    )
    emails = forms.CharField(
        required=False,
        label="E-mail addresses",
        help_text="E-mail: addresses separated by commas or spaces.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def clean_emails(self) -> list[str]:
        """The addresses as a list."""
        return self.cleaned_data["emails"].replace(",", " ").split()


class ReceiverCreateForm(ReceiverEditForm):
    """A new receiver (``receiver_create``): its name and kind, then its target."""

    name = forms.CharField(max_length=127)
    kind = forms.ChoiceField(
        choices=AlertReceiver.Kind.choices,
        help_text="alertmanager: the JSON body Alertmanager sends its webhook receivers; slack: "
        "a Slack incoming-webhook message; email: through Django's mail settings.",
    )
    field_order = ["name", "kind"]


SILENCE_DURATIONS = [
    (3600, "1 hour"),
    (4 * 3600, "4 hours"),
    (8 * 3600, "8 hours"),
    (24 * 3600, "1 day"),
    (7 * 86_400, "1 week"),
]


class SilenceForm(forms.Form):
    """A silence: how long (``duration_s``) and why (``reason``, required)."""

    duration_s = forms.TypedChoiceField(
        choices=SILENCE_DURATIONS, coerce=int, label="For", initial=3600
    )
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, widget=forms.Textarea({"rows": 2}))

    def clean_duration_s(self) -> int:
        """At most ``SILENCE_MAX_S``."""
        return min(self.cleaned_data["duration_s"], SILENCE_MAX_S)

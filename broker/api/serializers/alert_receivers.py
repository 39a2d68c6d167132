"""Input validation and output shapes of the alert receivers and silences endpoints
(``/api/v1/alert-receivers``, ``/api/v1/alert-silences``, additions to api-v1;
``docs/api.md``). Inputs check form with the strict JSON fields of ``broker.api.serializers``;
the services (``broker.services.alerts.receivers`` and ``.silences``) check meaning (the
webhook URL's target, the e-mail addresses, the reason, the alert and its rule).

A receiver's signing ``secret`` is answered once, by its create
(``AlertReceiverCreatedSerializer``), as the console shows it once; every other answer leaves
it out."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import (
    REASON_HELP,
    NameField,
    ReasonField,
    ReasonInputField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
)
from broker.models import AlertReceiver, AlertSilence
from broker.rules.clock import now_ms
from broker.services.alerts.receivers import EMAILS_MAX
from broker.services.alerts.silences import SILENCE_MAX_S

RECEIVER_KINDS = AlertReceiver.Kind.choices
"""The receiver kinds, one OpenAPI enum (``AlertReceiverKindEnum``, in ENUM_NAME_OVERRIDES)."""

_HELP = {
    "url": "alertmanager and slack: where the webhook is POSTed "
    "(HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS must allow it); not read for email.",
    "emails": f"email: 1 to {EMAILS_MAX} addresses; not read for the webhook kinds.",
}


def _url_field(**kwargs: object) -> serializers.CharField:
    return StrictCharField(max_length=2048, allow_blank=True, help_text=_HELP["url"], **kwargs)


def _emails_field(**kwargs: object) -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(max_length=254),
        max_length=EMAILS_MAX,
        help_text=_HELP["emails"],
        **kwargs,
    )


class AlertReceiverInSerializer(serializers.Serializer):
    """A new receiver; the validated data are ``receiver_create``'s arguments."""

    name = NameField()
    kind = StrictChoiceField(choices=RECEIVER_KINDS)
    url = _url_field(required=False, default="")
    emails = _emails_field(required=False, default=list)
    enabled = StrictBooleanField(required=False, default=True)


class AlertReceiverPatchSerializer(serializers.Serializer):
    """A change of a receiver: its target (``url`` or ``emails``, as its kind) and switch;
    its name, kind and secret stay."""

    url = _url_field(required=False)
    emails = _emails_field(required=False)
    enabled = StrictBooleanField(required=False)


class AlertReceiverOutSerializer(serializers.ModelSerializer):
    """A receiver as stored, without its secret."""

    class Meta:
        model = AlertReceiver
        fields = ["name", "kind", "url", "emails", "enabled", "created_timestamp"]


class AlertReceiverCreatedSerializer(AlertReceiverOutSerializer):
    """A receiver just created, with its signing ``secret``: answered this once only."""

    class Meta(AlertReceiverOutSerializer.Meta):
        fields = [*AlertReceiverOutSerializer.Meta.fields, "secret"]


class AlertSilenceInSerializer(serializers.Serializer):
    """A new silence: the rule of alert ``alert_id`` on that alert's group, for ``duration_s``
    seconds from now, and why."""

    alert_id = StrictIntegerField(
        min_value=1, help_text="The alert whose rule and group are silenced."
    )
    duration_s = StrictIntegerField(
        min_value=1, max_value=SILENCE_MAX_S, help_text="How long, in seconds (1..30 days)."
    )
    reason = ReasonField()


class AlertSilenceInputSerializer(AlertSilenceInSerializer):
    """What the create view validates: ``alert_silence``'s arguments."""

    reason = ReasonInputField(help_text=REASON_HELP)


class AlertSilenceExpireInSerializer(serializers.Serializer):
    """The early end of a silence: why."""

    reason = ReasonField()


class AlertSilenceExpireInputSerializer(AlertSilenceExpireInSerializer):
    """What the expire view validates."""

    reason = ReasonInputField(help_text=REASON_HELP)


class AlertSilenceOutSerializer(serializers.ModelSerializer):
    """A silence: the rule (by name) and group ("" = every group of the rule) it holds back,
    from ``starts_timestamp`` until ``ends_timestamp`` (ms), who set it and why, who ended it
    early (``expired_by``, "" if nobody) and whether it is in force now (``active``)."""

    rule = serializers.CharField(source="rule.name")
    active = serializers.SerializerMethodField()

    class Meta:
        model = AlertSilence
        fields = [
            "id",
            "rule",
            "group",
            "starts_timestamp",
            "ends_timestamp",
            "reason",
            "created_by",
            "expired_by",
            "active",
        ]

    def get_active(self, silence: AlertSilence) -> bool:
        """In force now: started and not yet over."""
        now = now_ms()
        return silence.starts_timestamp <= now < silence.ends_timestamp

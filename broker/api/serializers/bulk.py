"""Shapes of the bulk actions in the API (``/api/v1/bulk-actions``): the console's bulk commit,
rollback and resume-check over a frozen, previewed set (``broker.services.operations.bulk``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    ReasonField,
    ReasonInputField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    msg_id_validator,
)
from broker.models import AuditEntry
from broker.rules.states import DiscardReason
from broker.selectors.transactions import STUCK_STATES
from broker.services.operations.bulk import BULK_ACTIONS, BULK_MAX_TARGETS

BULK_STATES = [
    AuditEntry.State.PREVIEWED,
    AuditEntry.State.QUEUED,
    AuditEntry.State.RUNNING,
    AuditEntry.State.DONE,
]
"""A bulk action's states, in their order (``broker.services.operations.bulk``)."""

Q_MAX_LENGTH = 1024  # as the console's stuck-list filter (console.forms.transactions)


class StuckFilterSerializer(serializers.Serializer):
    """The stuck list's filter: the keyword arguments of
    ``broker.selectors.transactions.stuck_transactions`` (every field optional; none: every
    PREPARED and DISCARDED transaction)."""

    states = serializers.ListField(
        child=StrictChoiceField(choices=STUCK_STATES),
        required=False,
        max_length=len(STUCK_STATES),
        help_text="PREPARED and/or DISCARDED (default both)",
    )
    producer_group = NameField(required=False)
    topic = NameField(required=False)
    min_age_ms = StrictIntegerField(
        min_value=0, required=False, help_text="Born at least this long ago (ms)"
    )
    min_check_times = StrictIntegerField(
        min_value=0, required=False, help_text="At least this many checks delivered"
    )
    discard_reason = StrictChoiceField(choices=DiscardReason.values, required=False)
    q = StrictCharField(
        max_length=Q_MAX_LENGTH,
        required=False,
        help_text="An exact msg id / transaction id, or one of the message keys",
    )


class BulkPreviewInSerializer(serializers.Serializer):
    """A bulk preview as the OpenAPI document states it: the action, why (required, not
    blank), and exactly one of ``transaction_ids`` (a selection) and ``filter`` (the stuck
    list's filter)."""

    action = StrictChoiceField(choices=list(BULK_ACTIONS))
    reason = ReasonField(help_text="Why (required, not blank): kept in the audit log.")
    transaction_ids = serializers.ListField(
        child=StrictCharField(validators=[msg_id_validator]),
        required=False,
        min_length=1,
        max_length=BULK_MAX_TARGETS,
    )
    filter = StuckFilterSerializer(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("transaction_ids" in attrs) == ("filter" in attrs):
            raise serializers.ValidationError(
                "Give exactly one of transaction_ids (a selection) and filter."
            )
        return attrs


class BulkPreviewInputSerializer(BulkPreviewInSerializer):
    """What the preview view validates (``ReasonInputField``: a missing, null or blank reason
    passes to the service, which answers 400 ``reason_required``)."""

    reason = ReasonInputField(help_text="Why (required, not blank): kept in the audit log.")


class BulkActionOutSerializer(serializers.Serializer):
    """A bulk action: its audit entry (``AuditEntry``, ``action`` ``bulk-*``) and progress."""

    bulk_id = serializers.IntegerField(source="pk")
    action = serializers.SerializerMethodField()
    state = serializers.ChoiceField(choices=BULK_STATES)
    actor = serializers.CharField()
    via = serializers.CharField()
    reason = serializers.CharField()
    timestamp = serializers.IntegerField(help_text="Previewed at (ms)")
    scope = serializers.JSONField(help_text="The selection or filter it was made from")
    total = serializers.IntegerField(help_text="Transactions in the frozen set")
    processed = serializers.IntegerField(help_text="Targets no longer pending")
    counts = serializers.DictField(child=serializers.IntegerField())
    result = serializers.CharField()
    applied_by = serializers.CharField()
    applied_timestamp = serializers.IntegerField(allow_null=True)
    finished_timestamp = serializers.IntegerField(allow_null=True)

    def get_action(self, entry: AuditEntry) -> str:
        """``commit``, ``rollback`` or ``resume-check``."""
        return entry.action.removeprefix("bulk-")


class BulkTargetOutSerializer(serializers.Serializer):
    """One transaction of a bulk's frozen set and what happened to it."""

    transaction_id = serializers.CharField()
    result = serializers.CharField(help_text="pending, done, already_ended or failed")
    detail = serializers.JSONField()

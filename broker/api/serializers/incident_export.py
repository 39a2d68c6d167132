"""The incident export's request in the API (``POST /api/v1/incident-exports``): a selection of
transactions, or the filter of the stuck list, the message search or the audit log."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.api.serializers.bulk import StuckFilterSerializer
from broker.api.serializers.fields import (
    NameField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    msg_id_validator,
)
from broker.models import AuditEntry
from broker.selectors.incident import EXPORT_MAX_TRANSACTIONS

SCOPES = ("transaction_ids", "stuck", "messages", "audit")


class MessageFilterSerializer(serializers.Serializer):
    """The message search's filter (``GET /api/v1/message-search``'s, times as ms)."""

    topic = NameField(required=False)
    key = StrictCharField(required=False, max_length=1024)
    tag = StrictCharField(required=False, max_length=255)
    msg_id = StrictCharField(required=False, validators=[msg_id_validator])
    start_ms = StrictIntegerField(required=False, min_value=0)
    end_ms = StrictIntegerField(required=False, min_value=0)


class AuditFilterSerializer(serializers.Serializer):
    """The audit log's filter: ``actor`` (``console:alice``, or just ``alice``), ``action``,
    ``via``, ``transaction_id``, and the time range ``[since_ms, until_ms)``."""

    actor = StrictCharField(required=False, max_length=160)
    action = StrictChoiceField(choices=AuditEntry.Action.values, required=False)
    via = StrictChoiceField(choices=AuditEntry.Via.values, required=False)
    transaction_id = StrictCharField(required=False, validators=[msg_id_validator])
    since_ms = StrictIntegerField(required=False, min_value=0)
    until_ms = StrictIntegerField(required=False, min_value=0)


class IncidentExportInSerializer(serializers.Serializer):
    """Exactly one of ``transaction_ids`` (a selection), ``stuck``, ``messages`` and ``audit``
    (a filter)."""

    transaction_ids = serializers.ListField(
        child=StrictCharField(validators=[msg_id_validator]),
        required=False,
        min_length=1,
        max_length=EXPORT_MAX_TRANSACTIONS,
    )
    stuck = StuckFilterSerializer(required=False, help_text="The stuck list's filter")
    messages = MessageFilterSerializer(
        required=False, help_text="The message search: the transactions of the messages found"
    )
    audit = AuditFilterSerializer(
        required=False, help_text="The audit log's filter: the transactions its entries acted on"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [name for name in SCOPES if name in attrs]
        if len(given) != 1:
            raise serializers.ValidationError(
                "Give exactly one of transaction_ids, stuck, messages and audit."
            )
        return attrs

"""Serializers of transactions: prepare, end, resolve, resume-check, lists and timelines."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    QueryIntegerField,
    ReasonField,
    ReasonInputField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    msg_id_validator,
)
from broker.api.serializers.messages import MessageInSerializer
from broker.constants import (
    SEND_OK,
)
from broker.errors import InvalidInput
from broker.models import (
    Transaction,
)
from broker.rules.states import END_ACTIONS, RESOLVING_ACTIONS, TransactionState


class TransactionPrepareInSerializer(MessageInSerializer):
    """A half message. It takes no delivery time: ``deliver_at`` or ``delay_level`` is 400
    ``message_type_conflict`` (RocketMQ: a transactional message cannot be a delay message),
    declared here only to be refused (``refused_fields``; the OpenAPI document forbids them)."""

    refused_fields = ("deliver_at", "delay_level")
    producer_group = NameField()
    msg_id = StrictCharField(required=False, validators=[msg_id_validator])
    check_immunity_seconds = StrictIntegerField(required=False, allow_null=True)
    deliver_at = StrictIntegerField(required=False)
    delay_level = StrictIntegerField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        given = [name for name in self.refused_fields if name in attrs]
        if given:
            raise InvalidInput(
                "A half message takes no delivery time: delay and transactional messages "
                "exclude each other (send a normal message with deliver_at or delay_level).",
                code="message_type_conflict",
                details={
                    "fields": {name: ["A half message takes no delivery time."] for name in given}
                },
            )
        return attrs


class TransactionEndInSerializer(serializers.Serializer):
    producer_group = NameField()
    action = StrictChoiceField(choices=END_ACTIONS)
    from_transaction_check = StrictBooleanField(required=False, default=False)
    remark = StrictCharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=1024
    )


class OperatorReasonInSerializer(serializers.Serializer):
    """An operator's action that needs a reason (check now): why, kept in the audit log."""

    reason = ReasonField()


class OperatorReasonInputSerializer(OperatorReasonInSerializer):
    """What the check-now view validates (``ReasonInputField``)."""

    reason = ReasonInputField()


class TransactionResolveInSerializer(OperatorReasonInSerializer):
    """An operator's resolution (admin key): commit or roll back, and why."""

    action = StrictChoiceField(choices=RESOLVING_ACTIONS)


class TransactionResolveInputSerializer(TransactionResolveInSerializer):
    """What the resolve view validates (``ReasonInputField``)."""

    reason = ReasonInputField()


class TransactionResumeCheckInSerializer(serializers.Serializer):
    """An operator's resume-check (admin key): the body is optional (api-v1), its reason too."""

    reason = ReasonInputField(
        help_text="Why (optional): kept in the audit log with the access key's name."
    )


class TransactionListQuerySerializer(serializers.Serializer):
    state = StrictChoiceField(choices=TransactionState.values, required=False)
    producer_group = NameField(required=False)
    topic = NameField(required=False)


TRANSACTION_PAGE_DEFAULT = 100

TRANSACTION_PAGE_MAX = 1000


class PageQuerySerializer(serializers.Serializer):
    """A page of ``GET /api/v1/transactions``: ``page`` (from 1) and ``page_size`` (1 to
    ``TRANSACTION_PAGE_MAX``), integers in the query string; anything else is 400."""

    page = QueryIntegerField(min_value=1, required=False)
    page_size = QueryIntegerField(min_value=1, max_value=TRANSACTION_PAGE_MAX, required=False)


class TransactionPrepareOutSerializer(serializers.Serializer):
    """The SendResult of a half message: its transaction id (= msg_id), where the half message
    is stored, and the transaction's state."""

    status = serializers.CharField(default=SEND_OK)
    transaction_id = serializers.CharField()
    msg_id = serializers.CharField(source="transaction_id")
    commit_log_offset = serializers.IntegerField(source="half_commit_log_offset")
    half_queue_offset = serializers.IntegerField()
    state = serializers.CharField()

    def to_representation(self, instance: Transaction) -> dict[str, Any]:
        """The declared fields, read directly (each send and each item of a batch answers
        one): what DRF's field-by-field representation gives (None stays None), for a
        fraction of its cost."""
        commit_log_offset, queue_offset = (
            instance.half_commit_log_offset,
            instance.half_queue_offset,
        )
        return {
            "status": SEND_OK,
            "transaction_id": str(instance.transaction_id),
            "msg_id": str(instance.transaction_id),
            "commit_log_offset": None if commit_log_offset is None else int(commit_log_offset),
            "half_queue_offset": None if queue_offset is None else int(queue_offset),
            "state": str(instance.state),
        }


class TransactionEndOutSerializer(serializers.Serializer):
    """``{"transaction_id", "state"}``, plus where the message went once COMMITTED."""

    transaction_id = serializers.CharField()
    state = serializers.CharField()
    msg_id = serializers.CharField(required=False)
    topic = serializers.CharField(required=False)
    queue_id = serializers.IntegerField(required=False)
    queue_offset = serializers.IntegerField(required=False)

    def to_representation(self, instance: Transaction) -> dict[str, Any]:
        out: dict[str, Any] = {"transaction_id": instance.transaction_id, "state": instance.state}
        if instance.state == TransactionState.COMMITTED:
            out.update(
                msg_id=instance.transaction_id,
                topic=instance.topic,
                queue_id=instance.queue_id,
                queue_offset=instance.queue_offset,
            )
        return out


class TransactionOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = Transaction
        fields = [
            "transaction_id",
            "producer_group",
            "topic",
            "tags",
            "keys",
            "state",
            "check_times",
            "born_timestamp",
            "resolved_timestamp",
            "resolved_by",
            "next_check_timestamp",
            "discard_reason",
        ]


class TimelineEntrySerializer(serializers.Serializer):
    """One fact of a transaction's history (``broker.selectors.timeline_entry.TimelineEntry``):
    ``timestamp`` ms since the epoch (null when not journalled), ``kind``, ``title``,
    ``actor`` (who caused it, or ""), the journal's ``detail`` and, for a check, ``channel``:
    how it travelled (``webhook``, ``long poll``, ``telemetry (gRPC)``; "" for other kinds)."""

    timestamp = serializers.IntegerField(allow_null=True)
    kind = serializers.CharField()
    title = serializers.CharField()
    actor = serializers.CharField(allow_blank=True)
    detail = serializers.DictField()
    channel = serializers.CharField(allow_blank=True)


class TransactionTimelineOutSerializer(serializers.Serializer):
    """``GET /api/v1/transactions/{id}/timeline``: the transaction's id and current state, and
    its timeline, oldest first."""

    transaction_id = serializers.CharField()
    state = serializers.CharField()
    timeline = TimelineEntrySerializer(many=True)

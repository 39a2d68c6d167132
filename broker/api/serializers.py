"""Input validation and output shapes of api-v1. Inputs check form; services check meaning."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

from broker.constants import (
    NAME_PATTERN,
    RECEIVE_INVISIBLE_DURATION_MS,
    RECEIVE_MAX_MESSAGES,
    RECEIVE_WAIT_MS,
)
from broker.models import ConsumerGroup, Message, ProducerGroup, Topic, Transaction

name_validator = RegexValidator(
    NAME_PATTERN,
    "Must match ^[%%|a-zA-Z0-9_-]{1,127}$.",
    code="invalid_name",  # %% : message % params
)
msg_id_validator = RegexValidator(
    r"^[A-Za-z0-9_.:-]{1,64}$", "1-64 characters of A-Z a-z 0-9 _ . : -", code="invalid_msg_id"
)


def NameField(**kwargs: Any) -> serializers.CharField:  # noqa: N802 - a field factory
    return serializers.CharField(max_length=127, validators=[name_validator], **kwargs)


def body_fields(message: Message) -> dict[str, str]:
    """``{"body": text}`` for a body sent as text, else ``{"body_base64": ...}``."""
    raw = bytes(message.body)
    if message.body_is_text:
        return {"body": raw.decode("utf-8")}
    return {"body_base64": base64.b64encode(raw).decode("ascii")}


class MessageInSerializer(serializers.Serializer):
    """A message as a producer sends it: exactly one of ``body`` or ``body_base64``."""

    topic = NameField()
    tags = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    keys = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")
    body = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    body_base64 = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    properties = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_text, has_b64 = "body" in attrs, "body_base64" in attrs
        if has_text == has_b64:
            raise serializers.ValidationError({"body": "Send exactly one of body or body_base64."})
        if has_text:
            attrs["body_bytes"] = attrs.pop("body").encode("utf-8")
            attrs["body_is_text"] = True
        else:
            try:
                attrs["body_bytes"] = base64.b64decode(attrs.pop("body_base64"), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise serializers.ValidationError({"body_base64": "Not valid base64."}) from exc
            attrs["body_is_text"] = False
        return attrs


class MessageSendInSerializer(MessageInSerializer):
    producer_group = NameField(required=False, help_text="Which of the key's producer groups sends")


class TransactionPrepareInSerializer(MessageInSerializer):
    producer_group = NameField()
    msg_id = serializers.CharField(required=False, validators=[msg_id_validator])
    check_immunity_seconds = serializers.IntegerField(required=False, allow_null=True)


class TransactionEndInSerializer(serializers.Serializer):
    producer_group = NameField()
    action = serializers.ChoiceField(choices=["commit", "rollback", "unknown"])
    from_transaction_check = serializers.BooleanField(required=False, default=False)
    remark = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=1024
    )


class TransactionResolveInSerializer(serializers.Serializer):
    """An operator's resolution (admin key): commit or roll back, and why."""

    action = serializers.ChoiceField(choices=["commit", "rollback"])
    reason = serializers.CharField(
        max_length=1024,
        help_text="Why (required, not blank): kept in the audit trail with the access key's name.",
    )


class TransactionResolveInputSerializer(TransactionResolveInSerializer):
    """What the resolve view validates: a missing, null or blank ``reason`` passes through to
    ``transaction_operator_resolve``, which answers 400 ``reason_required`` for all three."""

    reason = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=1024
    )


class TransactionListQuerySerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=["PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"], required=False
    )
    producer_group = NameField(required=False)
    topic = NameField(required=False)


class MessageQuerySerializer(serializers.Serializer):
    topic = NameField()
    key = serializers.CharField(max_length=1024)


class TopicInSerializer(serializers.Serializer):
    name = NameField()
    queue_nums = serializers.IntegerField(min_value=1, max_value=1024, default=4)


class ProducerGroupInSerializer(serializers.Serializer):
    name = NameField()
    check_url = serializers.URLField(max_length=2048, allow_null=True, required=False, default=None)


class ProducerGroupPatchSerializer(serializers.Serializer):
    check_url = serializers.URLField(max_length=2048, allow_null=True)


class ConsumerGroupInSerializer(serializers.Serializer):
    name = NameField()
    max_delivery_attempts = serializers.IntegerField(min_value=1, max_value=1000, required=False)


class ReceiveInSerializer(serializers.Serializer):
    topic = NameField()
    max_messages = serializers.IntegerField(
        min_value=RECEIVE_MAX_MESSAGES[0], max_value=RECEIVE_MAX_MESSAGES[1], default=32
    )
    invisible_duration_ms = serializers.IntegerField(
        min_value=RECEIVE_INVISIBLE_DURATION_MS[0],
        max_value=RECEIVE_INVISIBLE_DURATION_MS[1],
        default=30000,
    )
    wait_ms = serializers.IntegerField(
        min_value=RECEIVE_WAIT_MS[0], max_value=RECEIVE_WAIT_MS[1], default=0
    )


class AckInSerializer(serializers.Serializer):
    receipt_handles = serializers.ListField(
        child=serializers.CharField(max_length=64), min_length=1, max_length=1024
    )


class CheckRequestsQuerySerializer(serializers.Serializer):
    wait_ms = serializers.IntegerField(min_value=0, max_value=30000, default=0)
    max_requests = serializers.IntegerField(min_value=1, max_value=32, default=32)


# --- Outputs ------------------------------------------------------------------------------------


class TopicOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = Topic
        fields = ["name", "queue_nums", "created_timestamp"]


class QueueOffsetsSerializer(serializers.Serializer):
    queue_id = serializers.IntegerField()
    min_offset = serializers.IntegerField()
    max_offset = serializers.IntegerField()


class TopicDetailOutSerializer(TopicOutSerializer):
    queues = QueueOffsetsSerializer(many=True, read_only=True)

    class Meta(TopicOutSerializer.Meta):
        fields = [*TopicOutSerializer.Meta.fields, "queues"]


class ProducerGroupOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProducerGroup
        fields = [
            "name",
            "check_url",
            "created_timestamp",
            "unreachable_since",
            "last_check_error",
            "last_poll_timestamp",
            "check_failures",
            "check_backoff_until",
        ]


class ProducerGroupCreatedSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProducerGroup
        fields = ["name", "check_url", "check_secret", "created_timestamp"]


class ConsumerGroupOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConsumerGroup
        fields = ["name", "max_delivery_attempts", "created_timestamp"]


class SendResultSerializer(serializers.Serializer):
    status = serializers.CharField(default="SEND_OK")
    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()


class MessageOutSerializer(serializers.Serializer):
    """A stored message; exactly one of body / body_base64 is present."""

    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    body = serializers.CharField(required=False)
    body_base64 = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField())
    producer_group = serializers.CharField()
    born_timestamp = serializers.IntegerField()
    store_timestamp = serializers.IntegerField()

    def to_representation(self, instance: Message) -> dict[str, Any]:
        return {
            "msg_id": instance.msg_id,
            "topic": instance.topic,
            "queue_id": instance.queue_id,
            "queue_offset": instance.queue_offset,
            "commit_log_offset": instance.commit_log_offset,
            "tags": instance.tags,
            "keys": instance.keys,
            **body_fields(instance),
            "properties": instance.properties,
            "producer_group": instance.producer_group,
            "born_timestamp": instance.born_timestamp,
            "store_timestamp": instance.store_timestamp,
        }


class ReceivedMessageSerializer(serializers.Serializer):
    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    body = serializers.CharField(required=False)
    body_base64 = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField())
    born_timestamp = serializers.IntegerField()
    store_timestamp = serializers.IntegerField()
    delivery_attempt = serializers.IntegerField()
    receipt_handle = serializers.CharField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        m = instance.message
        return {
            "msg_id": m.msg_id,
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
            "tags": m.tags,
            "keys": m.keys,
            **body_fields(m),
            "properties": m.properties,
            "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp,
            "delivery_attempt": instance.delivery_attempt,
            "receipt_handle": instance.receipt_handle,
        }


class ReceiveOutSerializer(serializers.Serializer):
    messages = ReceivedMessageSerializer(many=True)


class AckFailureSerializer(serializers.Serializer):
    receipt_handle = serializers.CharField()
    code = serializers.CharField()


class AckOutSerializer(serializers.Serializer):
    acked = serializers.IntegerField()
    failed = AckFailureSerializer(many=True)


class TransactionPrepareOutSerializer(serializers.Serializer):
    status = serializers.CharField(default="SEND_OK")
    transaction_id = serializers.CharField()
    msg_id = serializers.CharField()
    commit_log_offset = serializers.IntegerField()
    half_queue_offset = serializers.IntegerField()
    state = serializers.CharField()

    def to_representation(self, instance: Transaction) -> dict[str, Any]:
        return {
            "status": "SEND_OK",
            "transaction_id": instance.transaction_id,
            "msg_id": instance.transaction_id,
            "commit_log_offset": instance.half_commit_log_offset,
            "half_queue_offset": instance.half_queue_offset,
            "state": instance.state,
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
        if instance.state == "COMMITTED":
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


class CheckRequestOutSerializer(serializers.Serializer):
    """A back-check, as POSTed to check_url or handed to a poller (api-v1, Back-check)."""

    transaction_id = serializers.CharField()
    msg_id = serializers.CharField()
    producer_group = serializers.CharField()
    topic = serializers.CharField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    body = serializers.CharField(required=False)
    body_base64 = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField())
    check_times = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    half_queue_offset = serializers.IntegerField()
    born_timestamp = serializers.IntegerField()


class CheckRequestsOutSerializer(serializers.Serializer):
    check_requests = CheckRequestOutSerializer(many=True)

"""Serializers of messages: what a producer sends, what is stored and received, acks, and the
back-check requests a polling producer takes."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    QueryIntegerField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    msg_id_validator,
)
from broker.api.serializers.scheduled_messages import SCHEDULED_STATES
from broker.constants import (
    RECEIVE_INVISIBLE_DURATION_MS,
    RECEIVE_MAX_MESSAGES,
    RECEIVE_WAIT_MS,
    SEND_OK,
)
from broker.models import (
    Message,
)
from broker.rules.fifo import MESSAGE_GROUP_MAX_LENGTH
from broker.services.consumption.deliveries import CHANGE_INVISIBLE_DURATION_MS


def body_fields(message: Message) -> dict[str, str]:
    """``{"body": text}`` for a body sent as text, else ``{"body_base64": ...}``."""
    raw = bytes(message.body)
    if message.body_is_text:
        return {"body": raw.decode("utf-8")}
    return {"body_base64": base64.b64encode(raw).decode("ascii")}


class MessageInSerializer(serializers.Serializer):
    """A message as a producer sends it: exactly one of ``body`` or ``body_base64``.

    The validated data are the send service's keyword arguments: ``topic``, ``tags``,
    ``keys``, ``properties``, ``body`` (the decoded bytes) and ``body_is_text`` (whether it came
    as ``body``), plus the fields a subclass adds.
    """

    topic = NameField()
    tags = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    keys = StrictCharField(max_length=1024, required=False, allow_blank=True, default="")
    body = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    body_base64 = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    properties = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_text, has_b64 = "body" in attrs, "body_base64" in attrs
        if has_text == has_b64:
            raise serializers.ValidationError({"body": "Send exactly one of body or body_base64."})
        if has_text:
            attrs["body"] = attrs["body"].encode("utf-8")
            attrs["body_is_text"] = True
        else:
            try:
                attrs["body"] = base64.b64decode(attrs.pop("body_base64"), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise serializers.ValidationError({"body_base64": "Not valid base64."}) from exc
            attrs["body_is_text"] = False
        return attrs


class MessageSendInSerializer(MessageInSerializer):
    """A normal message, sent now or for a later time (a delay message): ``deliver_at`` or
    ``delay_level``, not both (the service's 400 ``delivery_time_conflict``)."""

    producer_group = NameField(required=False, help_text="Which of the key's producer groups sends")
    msg_id = StrictCharField(
        required=False,
        validators=[msg_id_validator],
        help_text="Your own message id (UNIQ_KEY): sent again by the same producer group to "
        "the same topic, nothing new is stored; absent: the broker makes one",
    )
    deliver_at = StrictIntegerField(
        required=False,
        min_value=0,
        help_text="Deliver at this time (ms since the epoch): a delay message, invisible until "
        "then; now or past: a normal send",
    )
    delay_level = StrictIntegerField(
        required=False,
        help_text="RocketMQ's delay level 1..18 (1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m "
        "20m 30m 1h 2h from now)",
    )
    message_group = StrictCharField(
        required=False,
        max_length=MESSAGE_GROUP_MAX_LENGTH,
        trim_whitespace=False,
        help_text="A FIFO message's group (1-64 characters, not blank, no control character): "
        "stored in the group's queue (SHA-256 of the group modulo the topic's queues), in send "
        "order; not with deliver_at or delay_level",
    )


class MessageQuerySerializer(serializers.Serializer):
    topic = NameField()
    key = StrictCharField(max_length=1024)


FILTER_EXPRESSION_MAX_LENGTH = 4096
"""The longest filter expression a receive takes (characters)."""


class FilterInSerializer(serializers.Serializer):
    """A receive's filter (RocketMQ's ``FilterExpression``): TAG (``*``, ``TagA || TagB``) or
    SQL92 over the message's properties (``a > 5 AND b = 'x'``)."""

    type = StrictChoiceField(choices=["TAG", "SQL92"], default="TAG")
    expression = StrictCharField(
        max_length=FILTER_EXPRESSION_MAX_LENGTH, allow_blank=True, default="*"
    )


class ReceiveInSerializer(serializers.Serializer):
    topic = NameField()
    filter = FilterInSerializer(
        required=False,
        help_text="Only messages it matches are delivered; the others count as consumed. "
        "Default TAG '*' (every message).",
    )
    max_messages = StrictIntegerField(
        min_value=RECEIVE_MAX_MESSAGES[0], max_value=RECEIVE_MAX_MESSAGES[1], default=32
    )
    invisible_duration_ms = StrictIntegerField(
        min_value=RECEIVE_INVISIBLE_DURATION_MS[0],
        max_value=RECEIVE_INVISIBLE_DURATION_MS[1],
        default=30000,
    )
    wait_ms = StrictIntegerField(
        min_value=RECEIVE_WAIT_MS[0], max_value=RECEIVE_WAIT_MS[1], default=0
    )


class AckInSerializer(serializers.Serializer):
    receipt_handles = serializers.ListField(
        child=StrictCharField(max_length=64), min_length=1, max_length=1024
    )


class ChangeInvisibleDurationInSerializer(serializers.Serializer):
    receipt_handle = StrictCharField(max_length=64)
    invisible_duration_ms = StrictIntegerField(
        min_value=CHANGE_INVISIBLE_DURATION_MS[0],
        max_value=CHANGE_INVISIBLE_DURATION_MS[1],
        help_text="From now until the message is visible again (ms); 0: at once",
    )


class ChangeInvisibleDurationOutSerializer(serializers.Serializer):
    """``broker.services.consumption.deliveries.InvisibleChanged``: the new receipt handle (the old one no
    longer works) and when the message becomes visible again (ms)."""

    receipt_handle = serializers.CharField()
    invisible_until_timestamp = serializers.IntegerField()


class DeadLetterInSerializer(serializers.Serializer):
    receipt_handle = StrictCharField(max_length=64)


class CheckRequestsQuerySerializer(serializers.Serializer):
    wait_ms = QueryIntegerField(min_value=0, max_value=30000, default=0)
    max_requests = QueryIntegerField(min_value=1, max_value=32, default=32)


class SendResultSerializer(serializers.Serializer):
    """RocketMQ's SendResult of a normal message: SEND_OK and where the message is stored. A
    delay message that waits for its time adds ``delivery_timestamp``, ``state`` and
    ``recall_handle`` (its ``queue_id`` is the queue it will be delivered to, its
    ``queue_offset`` and ``commit_log_offset`` where it waits on RMQ_SYS_WHEEL_TIMER, as
    RocketMQ's SendResult of a timer message)."""

    status = serializers.CharField(default=SEND_OK)
    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    delivery_timestamp = serializers.IntegerField(
        required=False, help_text="A delay message: when it is due (ms)"
    )
    state = serializers.ChoiceField(
        choices=SCHEDULED_STATES,
        required=False,
        help_text="A delay message: SCHEDULED (a resend by msg_id: its state now)",
    )
    recall_handle = serializers.CharField(
        required=False, help_text="A delay message: what POST /scheduled-messages/recall takes"
    )


class MessageContentSerializer(serializers.Serializer):
    """What the producer sent, in every output that shows a message: its msg_id, tags and
    keys, exactly one of body / body_base64 (``body_fields``), properties and birth time."""

    msg_id = serializers.CharField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    body = serializers.CharField(required=False)
    body_base64 = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField())
    born_timestamp = serializers.IntegerField()


class StoredMessageSerializer(MessageContentSerializer):
    """A stored message: its content, where it is stored and when. Every declared field is
    read from the ``Message`` of that name, the body as ``body_fields`` says."""

    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    store_timestamp = serializers.IntegerField()
    message_group = serializers.CharField(help_text="A FIFO message's group; empty for none")

    def to_representation(self, instance: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.fields:
            if name == "body":
                out.update(body_fields(instance))
            elif name != "body_base64":
                out[name] = getattr(instance, name)
        return out


class MessageOutSerializer(StoredMessageSerializer):
    """A stored message as its producer or an admin looks it up (RocketMQ viewMessage)."""

    commit_log_offset = serializers.IntegerField()
    producer_group = serializers.CharField()


class ReceivedMessageSerializer(StoredMessageSerializer):
    """A message handed to a consumer (``broker.services.consumption.receive.Received``)."""

    delivery_attempt = serializers.IntegerField()
    receipt_handle = serializers.CharField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        message = StoredMessageSerializer().to_representation(instance.message)
        return {
            **message,
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


class CheckRequestOutSerializer(MessageContentSerializer):
    """A back-check, as POSTed to check_url or handed to a poller (api-v1, Back-check): the
    half message's content and where it is stored, and the check's number."""

    transaction_id = serializers.CharField()
    producer_group = serializers.CharField()
    topic = serializers.CharField()
    check_times = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    half_queue_offset = serializers.IntegerField()


class CheckRequestsOutSerializer(serializers.Serializer):
    check_requests = CheckRequestOutSerializer(many=True)

"""Shapes of a FIFO consumer group's blocked message groups in the API
(``/api/v1/consumer-groups/{group}/blocked-message-groups``, additions to api-v1;
``docs/api.md``): the list's query and rows, and the dead-letter of a blocked head."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import (
    CompiledRegexValidator,
    NameField,
    QueryIntegerField,
    ReasonField,
    ReasonInputField,
    StrictCharField,
    msg_id_validator,
)
from broker.selectors.blocked_message_groups import BLOCKED_PAGE, WAITING_CAP

MESSAGE_GROUP_MAX = 64  # Message.message_group
_NO_NUL = CompiledRegexValidator(r"^[^\u0000]+$", code="invalid")


class BlockedMessageGroupsQuerySerializer(serializers.Serializer):
    """The list's query: at most ``limit`` message groups (1..``BLOCKED_PAGE``)."""

    limit = QueryIntegerField(min_value=1, max_value=BLOCKED_PAGE, default=BLOCKED_PAGE)


class BlockedMessageGroupOutSerializer(serializers.Serializer):
    """One blocked message group and its head message."""

    topic = serializers.CharField()
    message_group = serializers.CharField()
    msg_id = serializers.CharField(help_text="The head: the group's earliest message not acked")
    commit_log_offset = serializers.IntegerField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    store_timestamp = serializers.IntegerField(help_text="The head's store time (ms)")
    delivery_attempt = serializers.IntegerField(help_text="The head's hand-outs so far")
    max_delivery_attempts = serializers.IntegerField(
        help_text="The group's; past it the broker moves the head to %DLQ%{group} itself"
    )
    invisible_until_timestamp = serializers.IntegerField(
        help_text="When the head is visible to the group again (ms)"
    )
    blocked_since = serializers.IntegerField(
        allow_null=True,
        help_text="The head's first hand-out (ms); null when the delivery journal no longer "
        "holds it",
    )
    waiting = serializers.IntegerField(
        help_text=f"Later messages of the message group in its queue, counted up to {WAITING_CAP}"
    )
    waiting_capped = serializers.BooleanField(help_text=f"More than {WAITING_CAP} wait")


class BlockedMessageGroupsOutSerializer(serializers.Serializer):
    """The FIFO consumer group's blocked message groups, oldest blocked first."""

    consumer_group = serializers.CharField()
    fifo = serializers.BooleanField()
    total = serializers.IntegerField(help_text="Blocked message groups in all")
    blocked_message_groups = BlockedMessageGroupOutSerializer(many=True)


class HeadDeadLetterInSerializer(serializers.Serializer):
    """Send a blocked message group's head to the DLQ, as the OpenAPI document states it."""

    topic = NameField()
    message_group = StrictCharField(max_length=MESSAGE_GROUP_MAX, validators=[_NO_NUL])
    msg_id = StrictCharField(
        required=False,
        validators=[msg_id_validator],
        help_text="The head you saw: refused (409 message_group_head_changed) if it is no "
        "longer the head",
    )
    reason = ReasonField()


class HeadDeadLetterInputSerializer(HeadDeadLetterInSerializer):
    """What the view validates (``ReasonInputField``: the service answers
    ``reason_required``)."""

    reason = ReasonInputField()

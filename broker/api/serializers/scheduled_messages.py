"""Shapes of delay and timer messages in the API (``/api/v1/scheduled-messages``, additions to
api-v1): the list's query, a scheduled message with its recall handle and timeline, and the
two recalls' bodies (a producer's by recall handle, an operator's by msg_id with a reason)."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import (
    CompiledRegexValidator,
    NameField,
    QueryIntegerField,
    StrictCharField,
    StrictChoiceField,
    msg_id_validator,
)
from broker.models import ScheduledMessage
from broker.rules.timers import recall_handle_of

SCHEDULED_STATES = list(ScheduledMessage.State.values)
"""A scheduled message's states, one enum of the OpenAPI document (``ScheduledStateEnum``)."""

RECALL_HANDLE_PATTERN = r"^[A-Za-z0-9_=-]+$"
"""A recall handle as the document states it: URL-safe base64 (``recall_handle_format``)."""


class ScheduledMessageQuerySerializer(serializers.Serializer):
    """``GET /api/v1/scheduled-messages``: every filter optional."""

    topic = NameField(required=False, help_text="The topic it is (or was) due on")
    state = StrictChoiceField(
        choices=SCHEDULED_STATES,
        required=False,
        help_text="SCHEDULED (waiting), DELIVERED or RECALLED; absent: every state",
    )
    key = StrictCharField(required=False, max_length=1024, help_text="One of its keys")
    msg_id = StrictCharField(required=False, validators=[msg_id_validator])
    producer_group = NameField(required=False)
    due_after = QueryIntegerField(
        required=False, min_value=0, help_text="Due at or after (ms since the epoch)"
    )
    due_before = QueryIntegerField(
        required=False, min_value=0, help_text="Due before (ms since the epoch)"
    )


class ScheduleEventOutSerializer(serializers.Serializer):
    """One step of a scheduled message's timeline (``broker.rules.timers.ScheduleEvent``)."""

    kind = serializers.ChoiceField(choices=["sent", "due", "delivered", "recalled"])
    timestamp = serializers.IntegerField()
    title = serializers.CharField()
    reached = serializers.BooleanField(help_text="False: a due time ahead, or never reached")
    actor = serializers.CharField(help_text='Who recalled it ("" otherwise)')
    reason = serializers.CharField(help_text='Why it was recalled ("" otherwise)')
    commit_log_offset = serializers.IntegerField(
        allow_null=True, help_text="sent: the stored message; delivered: the delivered copy"
    )


class ScheduledMessageOutSerializer(serializers.Serializer):
    """A delay or timer message (``ScheduledMessage``): where it waits or waited
    (``commit_log_offset`` on RMQ_SYS_WHEEL_TIMER), when it is due, what became of it, and the
    recall handle that names it (the one its send answered)."""

    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    producer_group = serializers.CharField()
    state = serializers.ChoiceField(choices=SCHEDULED_STATES)
    delivery_timestamp = serializers.IntegerField()
    scheduled_timestamp = serializers.IntegerField(help_text="Sent and stored (ms)")
    commit_log_offset = serializers.IntegerField(help_text="Stored on RMQ_SYS_WHEEL_TIMER")
    delivered_commit_log_offset = serializers.IntegerField(
        allow_null=True, help_text="The copy delivered on its topic"
    )
    ended_timestamp = serializers.IntegerField(allow_null=True, help_text="Delivered or recalled")
    recalled_by = serializers.CharField()
    recall_reason = serializers.CharField()
    recall_handle = serializers.SerializerMethodField()

    def get_recall_handle(self, row: ScheduledMessage) -> str:
        """The recall handle naming it (``recall_handle_of``)."""
        return recall_handle_of(
            topic=row.topic, delivery_timestamp=row.delivery_timestamp, msg_id=row.msg_id
        )


class ScheduledMessageDetailOutSerializer(ScheduledMessageOutSerializer):
    """One scheduled message with its timeline (the instance's ``timeline``: a list of
    ``ScheduleEvent``, oldest first)."""

    timeline = ScheduleEventOutSerializer(many=True)


class RecallInSerializer(serializers.Serializer):
    """A producer's recall (RocketMQ 5.3 ``RecallMessageRequest``): the topic and the recall
    handle its send answered."""

    topic = NameField()
    recall_handle = StrictCharField(
        max_length=1024,
        validators=[CompiledRegexValidator(RECALL_HANDLE_PATTERN, code="invalid")],
        help_text="As the send answered it",
    )

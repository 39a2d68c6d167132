"""Shapes of a consumer group's operations in the API (``/api/v1/consumer-groups/{group}/...``):
offsets, offset resets and skips (previewed, then applied), resends and the dead-letter queue
(``broker.services.consumption``)."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    QueryIntegerField,
    ReasonField,
    ReasonInputField,
    StrictCharField,
    StrictIntegerField,
    msg_id_validator,
)
from broker.models import AuditEntry
from broker.selectors.consumer_groups import DEAD_LETTERS_PAGE
from broker.services.consumption.dead_letters import DEAD_LETTERS_MAX


class GroupQueueOffsetOutSerializer(serializers.Serializer):
    """The group's offset on one queue."""

    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    offset = serializers.IntegerField(help_text="The next queue offset the group has not taken")
    max_offset = serializers.IntegerField(help_text="The queue offset of the next message stored")
    lag = serializers.IntegerField(help_text="max_offset - offset (at least 0)")


class OffsetResetInSerializer(serializers.Serializer):
    """A reset to a time: ``timestamp`` (ms since the epoch) and an optional ``topic``."""

    timestamp = StrictIntegerField(
        min_value=0, help_text="Reset to the first message stored at or after it (ms)"
    )
    topic = NameField(
        required=False, help_text="One topic (default: every topic it has offsets on)"
    )


class BacklogSkipInSerializer(serializers.Serializer):
    """Skip the backlog: an optional ``topic``."""

    topic = NameField(
        required=False, help_text="One topic (default: every topic it has offsets on)"
    )


class ResendInSerializer(serializers.Serializer):
    """A resend to one group, as the OpenAPI document states it: the message by ``msg_id``
    (and ``topic`` when the id is on several topics) and the ``reason``."""

    msg_id = StrictCharField(validators=[msg_id_validator])
    topic = NameField(required=False)
    reason = ReasonField()


class ResendInputSerializer(ResendInSerializer):
    """What the resend view validates (``ReasonInputField``: the service answers
    ``reason_required``)."""

    reason = ReasonInputField()


class DeadLettersPreviewInSerializer(serializers.Serializer):
    """A dead-letter set: ``commit_log_offsets`` of the DLQ copies, or none: every dead letter
    stored now."""

    commit_log_offsets = serializers.ListField(
        child=StrictIntegerField(min_value=0),
        required=False,
        min_length=1,
        max_length=DEAD_LETTERS_MAX,
    )


class ConsumerGroupOperationOutSerializer(serializers.Serializer):
    """An operation on a consumer group: its audit entry (``AuditEntry``) and, for a
    dead-letter set, its progress."""

    id = serializers.IntegerField(source="pk")
    action = serializers.CharField(
        help_text="reset-offset, skip-backlog, resend-message, resend-dead-letter, "
        "resend-dead-letters or dead-letter-head"
    )
    state = serializers.CharField(help_text="previewed, queued, running or done")
    consumer_group = serializers.SerializerMethodField()
    actor = serializers.CharField()
    via = serializers.CharField()
    reason = serializers.CharField(help_text="Empty until applied")
    timestamp = serializers.IntegerField(help_text="Previewed (or done) at (ms)")
    scope = serializers.JSONField(
        help_text="A reset: {consumer_group, topic, timestamp, queues: [{topic, queue_id, "
        "current, new, direction, redeliver, skip}], redeliver, skip}; a dead-letter set: "
        "{consumer_group, kind, selected?, skipped?, until}"
    )
    total = serializers.IntegerField(help_text="Messages to deliver again or skip; dead letters")
    processed = serializers.IntegerField()
    counts = serializers.DictField(child=serializers.IntegerField())
    result = serializers.CharField()
    applied_by = serializers.CharField()
    applied_timestamp = serializers.IntegerField(allow_null=True)
    finished_timestamp = serializers.IntegerField(allow_null=True)

    def get_consumer_group(self, entry: AuditEntry) -> str:
        return str(entry.scope.get("consumer_group", ""))


class GroupOffsetsQuerySerializer(serializers.Serializer):
    """The query of a group's offsets: one ``topic`` only, or every topic when left out."""

    topic = NameField(required=False, help_text="One topic only")


class DeadLetterQuerySerializer(serializers.Serializer):
    """A page of a group's dead letters: below the commit log offset ``before``, at most
    ``limit`` (1..``DEAD_LETTERS_PAGE``, the selector's page, by default); anything else is
    400."""

    before = QueryIntegerField(
        min_value=0, required=False, help_text="Only dead letters below this commit log offset"
    )
    limit = QueryIntegerField(min_value=1, max_value=DEAD_LETTERS_PAGE, default=DEAD_LETTERS_PAGE)


class DeadLetterOutSerializer(serializers.Serializer):
    """A dead letter of the group and its original message."""

    commit_log_offset = serializers.IntegerField(source="message.commit_log_offset")
    msg_id = serializers.CharField(source="message.msg_id")
    store_timestamp = serializers.IntegerField(source="message.store_timestamp")
    origin_msg_id = serializers.CharField(help_text="ORIGIN_MESSAGE_ID")
    origin_topic = serializers.CharField(help_text="RETRY_TOPIC: the original's topic")
    delivery_attempt = serializers.IntegerField(help_text="The attempt it was dead-lettered at")
    resent = serializers.IntegerField(help_text="Times an operator resent it to the group")

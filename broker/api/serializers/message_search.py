"""Shapes of the message search in the API (``GET /api/v1/message-search``) and of a message's
standing with each consumer group (``GET /api/v1/messages/{msg_id}/deliveries``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from broker.api.serializers.fields import (
    CompiledRegexValidator,
    NameField,
    QueryIntegerField,
    StrictCharField,
    StrictChoiceField,
    msg_id_validator,
)
from broker.api.serializers.scheduled_messages import SCHEDULED_STATES
from broker.models import Message
from broker.rules.messages import DeliveryState, MessageKind, message_kind
from broker.selectors.message_search import SEARCH_PAGE_DEFAULT, SEARCH_PAGE_MAX, SearchCursor


class SearchCursorField(StrictCharField):
    """A page position of the search: the ``next_before`` or ``previous_after`` of a page
    (``SearchCursor.encode``: ``<store_timestamp>.<commit_log_offset>``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            max_length=40,
            validators=[CompiledRegexValidator(r"^[0-9]{1,19}[.][0-9]{1,19}$", code="invalid")],
            **kwargs,
        )

    def run_validation(self, data: Any = serializers.empty) -> SearchCursor:
        text = super().run_validation(data)
        try:
            return SearchCursor.decode(text)
        except ValueError:
            raise serializers.ValidationError(
                "Not a page position: give a page's next_before or previous_after."
            ) from None


class MessageSearchQuerySerializer(serializers.Serializer):
    topic = NameField(required=False)
    key = StrictCharField(required=False, max_length=1024, help_text="One of the message's keys")
    tag = StrictCharField(required=False, max_length=255)
    msg_id = StrictCharField(
        required=False,
        validators=[msg_id_validator],
        help_text="A msg id; a transactional message's is its transaction id",
    )
    start = QueryIntegerField(
        required=False, min_value=0, help_text="Stored at or after (ms since the epoch)"
    )
    end = QueryIntegerField(
        required=False, min_value=0, help_text="Stored before (ms since the epoch)"
    )
    scheduled_state = StrictChoiceField(
        choices=SCHEDULED_STATES,
        required=False,
        help_text="Only delay and timer messages as sent (on RMQ_SYS_WHEEL_TIMER) in this "
        "state: SCHEDULED (waiting), DELIVERED or RECALLED",
    )
    due_start = QueryIntegerField(
        required=False,
        min_value=0,
        help_text="Only delay and timer messages as sent, due at or after (ms since the epoch)",
    )
    due_end = QueryIntegerField(
        required=False,
        min_value=0,
        help_text="Only delay and timer messages as sent, due before (ms since the epoch)",
    )
    message_group = StrictCharField(
        required=False, max_length=64, help_text="Only FIFO messages of this message group"
    )
    before = SearchCursorField(required=False, help_text="The older page")
    after = SearchCursorField(required=False, help_text="The newer page")
    limit = QueryIntegerField(
        required=False, min_value=1, max_value=SEARCH_PAGE_MAX, default=SEARCH_PAGE_DEFAULT
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "before" in attrs and "after" in attrs:
            raise serializers.ValidationError("Give at most one of before and after.")
        if "start" in attrs and "end" in attrs and attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["Must be after start."]})
        if "due_start" in attrs and "due_end" in attrs and attrs["due_end"] <= attrs["due_start"]:
            raise serializers.ValidationError({"due_end": ["Must be after due_start."]})
        return attrs


class ScheduledSummarySerializer(serializers.Serializer):
    """What became of a delay or timer message: its state and due time (ms)."""

    state = serializers.ChoiceField(choices=SCHEDULED_STATES)
    delivery_timestamp = serializers.IntegerField()


class MessageSummarySerializer(serializers.Serializer):
    """A message of a search: where and when it is stored and what it is, without its body;
    ``scheduled`` for a delay message as sent or its delivered copy (the context's
    ``scheduled``: ``MessagePage.scheduled``), else null."""

    msg_id = serializers.CharField()
    kind = serializers.SerializerMethodField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    producer_group = serializers.CharField()
    message_group = serializers.CharField(help_text="FIFO message group; empty for none")
    born_timestamp = serializers.IntegerField()
    store_timestamp = serializers.IntegerField()

    scheduled = serializers.SerializerMethodField()

    def get_kind(self, message: Message) -> MessageKind:
        """half, op, discarded, dead_letter, retry, committed, normal or scheduled."""
        return message_kind(message.topic, message.prepared_transaction_offset)

    @extend_schema_field(ScheduledSummarySerializer(allow_null=True))
    def get_scheduled(self, message: Message) -> dict[str, Any] | None:
        """The message's schedule (``ScheduledSummarySerializer``), or None."""
        row = self.context.get("scheduled", {}).get(message.pk)
        if row is None:
            return None
        return {"state": row.state, "delivery_timestamp": row.delivery_timestamp}


class ArchiveSegmentOutSerializer(serializers.Serializer):
    start_timestamp = serializers.IntegerField()
    end_timestamp = serializers.IntegerField()
    uri = serializers.CharField()
    rows = serializers.DictField(child=serializers.IntegerField())


class ArchiveNoteOutSerializer(serializers.Serializer):
    """Messages stored before ``pruned_until_timestamp`` were pruned once archived: the
    archive segments of the search's time (``segments``, the newest 20, of
    ``segment_count``)."""

    pruned_until_timestamp = serializers.IntegerField(source="pruned_until")
    segment_count = serializers.IntegerField(source="count")
    segments = ArchiveSegmentOutSerializer(many=True)


class MessageSearchOutSerializer(serializers.Serializer):
    messages = MessageSummarySerializer(many=True)
    next_before = serializers.CharField(allow_null=True, help_text="The older page's cursor")
    previous_after = serializers.CharField(allow_null=True, help_text="The newer page's cursor")
    archive = ArchiveNoteOutSerializer(allow_null=True)


class GroupDeliveryOutSerializer(serializers.Serializer):
    consumer_group = serializers.CharField()
    state = serializers.ChoiceField(choices=[s.value for s in DeliveryState])
    deliveries = serializers.IntegerField(help_text="Times handed out")
    first_delivered_timestamp = serializers.IntegerField(allow_null=True)
    last_event = serializers.CharField(allow_null=True, help_text="delivered, acked, ...")
    last_event_timestamp = serializers.IntegerField(allow_null=True)
    invisible_until_timestamp = serializers.IntegerField(source="invisible_until", allow_null=True)


class MessageDeliveriesOutSerializer(serializers.Serializer):
    msg_id = serializers.CharField()
    commit_log_offset = serializers.IntegerField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    deliveries = GroupDeliveryOutSerializer(many=True)

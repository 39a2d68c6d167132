"""Serializers of topics, producer groups and consumer groups."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from rest_framework import serializers

from broker.api.serializers.fields import (
    NameField,
    StrictChoiceField,
    StrictIntegerField,
    StrictURLField,
)
from broker.models import (
    ConsumerGroup,
    ProducerGroup,
    Topic,
)
from broker.rules.message_types import TopicMessageType
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN, system_topic_pattern
from broker.services.topology.writes import RESERVED_GROUP_PREFIXES


class NewNameInSerializer(serializers.Serializer):
    """A create body whose ``name`` may not be one the broker keeps for itself: the service
    refuses those (400), and the subclass's ``reserved_name_pattern`` (a regular expression)
    says which for the OpenAPI document (``broker.api.schema.NewNameSchema``)."""

    reserved_name_pattern: ClassVar[str]
    name = NameField()


class TopicInSerializer(NewNameInSerializer):
    reserved_name_pattern = system_topic_pattern()  # broker.rules.topics.is_system_topic
    queue_nums = StrictIntegerField(min_value=QUEUE_NUMS_MIN, max_value=QUEUE_NUMS_MAX, default=4)
    message_type = StrictChoiceField(
        choices=TopicMessageType.choices,
        default=TopicMessageType.MIXED,
        help_text="The type of message the topic accepts (RocketMQ's message.type); MIXED, "
        "the default, accepts every type.",
    )


RESERVED_GROUP_PATTERN = "^(?:" + "|".join(re.escape(p) for p in RESERVED_GROUP_PREFIXES) + ")"
"""The group names ``broker.services.topology.writes.group_name_validate`` refuses (reserved_group)."""


class ProducerGroupInSerializer(NewNameInSerializer):
    reserved_name_pattern = RESERVED_GROUP_PATTERN
    check_url = StrictURLField(max_length=2048, allow_null=True, required=False, default=None)


class WholeBodyPatchSerializer(serializers.Serializer):
    """A PATCH body validated whole: its fields are required (``broker.api.schema.
    WholeBodyPatchSchema`` keeps them required in the OpenAPI document)."""


class ProducerGroupPatchSerializer(WholeBodyPatchSerializer):
    check_url = StrictURLField(max_length=2048, allow_null=True)


class TopicPatchSerializer(serializers.Serializer):
    """A topic's change: ``queue_nums`` and/or ``message_type``, at least one of them."""

    queue_nums = StrictIntegerField(
        min_value=QUEUE_NUMS_MIN, max_value=QUEUE_NUMS_MAX, required=False
    )
    message_type = StrictChoiceField(
        choices=TopicMessageType.choices,
        required=False,
        help_text="The type of message the topic accepts from now on (RocketMQ's "
        "message.type); stored messages are not changed.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """At least one field (an empty change is a client's mistake)."""
        if not attrs:
            raise serializers.ValidationError("Give queue_nums, message_type or both.")
        return attrs


class ConsumerGroupPatchSerializer(WholeBodyPatchSerializer):
    max_delivery_attempts = StrictIntegerField(min_value=1, max_value=1000)


class ConsumerGroupInSerializer(NewNameInSerializer):
    reserved_name_pattern = RESERVED_GROUP_PATTERN
    max_delivery_attempts = StrictIntegerField(min_value=1, max_value=1000, required=False)


class TopicOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = Topic
        fields = ["name", "queue_nums", "message_type", "created_timestamp"]


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

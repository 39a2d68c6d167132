"""The commit log (RocketMQ CommitLog + ConsumeQueue): topics, their queues' counters and every stored message."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Q

from broker.rules.clock import now_ms
from broker.rules.message_types import TopicMessageType
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN


class Topic(models.Model):
    """A topic, its number of queues (RocketMQ TopicConfig readQueueNums/writeQueueNums) and
    the type of message it accepts (its ``message.type`` attribute)."""

    name = models.CharField(max_length=127, unique=True)
    queue_nums = models.PositiveIntegerField()
    system = models.BooleanField(default=False, help_text="Broker-owned (RMQ_SYS_*, %DLQ%*, ...)")
    created_timestamp = models.BigIntegerField(default=now_ms)
    message_type = models.CharField(
        max_length=16,
        choices=TopicMessageType.choices,
        default=TopicMessageType.MIXED,
        db_default=TopicMessageType.MIXED,
        help_text="RocketMQ's message.type: the type its messages have, or MIXED (all)",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(queue_nums__gte=QUEUE_NUMS_MIN) & Q(queue_nums__lte=QUEUE_NUMS_MAX),
                name="topic_queue_nums_range",
            ),
            models.CheckConstraint(
                condition=Q(message_type__in=TopicMessageType.values),
                name="topic_message_type_known",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ConsumeQueue(models.Model):
    """One queue of a topic; ``max_offset`` is the queue offset the next append receives."""

    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    max_offset = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["topic", "queue_id"], name="one_consume_queue")
        ]

    def __str__(self) -> str:
        return f"{self.topic}#{self.queue_id}@{self.max_offset}"


def keys_array() -> models.Func:
    """``string_to_array(keys, ' ')``: a message's or transaction's keys as an array (RocketMQ's
    KEYS property, keys separated by ``MessageConst.KEY_SEPARATOR``, a space). The expression
    of the index ``message_multi_keys``, written once so that the index and the queries
    (``broker.selectors.queries.key_match``) agree."""
    return models.Func(
        models.F("keys"),
        models.Value(" "),
        function="string_to_array",
        output_field=ArrayField(models.TextField()),
    )


MULTI_KEYS = Q(keys__contains=" ")
"""A row of several keys: the condition of the partial index ``message_multi_keys``."""


class Message(models.Model):
    """One message of the commit log (RocketMQ MessageExt)."""

    commit_log_offset = models.BigAutoField(primary_key=True)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    queue_offset = models.BigIntegerField()
    msg_id = models.CharField(max_length=64, help_text="UNIQ_KEY")
    tags = models.CharField(max_length=255, blank=True, default="")
    keys = models.CharField(max_length=1024, blank=True, default="")
    body = models.BinaryField()
    body_is_text = models.BooleanField(default=True, help_text="Sent as `body` (UTF-8), not base64")
    properties = models.JSONField(default=dict, blank=True)
    sys_flag = models.IntegerField(default=0, help_text="MessageSysFlag transaction bits")
    producer_group = models.CharField(max_length=127, blank=True, default="")
    message_group = models.CharField(
        max_length=64, blank=True, default="", db_default="", help_text="FIFO message group"
    )
    born_timestamp = models.BigIntegerField()
    store_timestamp = models.BigIntegerField(default=now_ms)
    prepared_transaction_offset = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Commit log offset of the half message this commit delivers",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["topic", "queue_id", "queue_offset"], name="one_message_per_queue_offset"
            ),
            # A half message is delivered to its real topic at most once (RocketMQ #5574, #9909).
            models.UniqueConstraint(
                fields=["prepared_transaction_offset"], name="one_delivery_per_half_message"
            ),
        ]
        indexes = [
            models.Index(fields=["msg_id"], name="message_msg_id"),
            # A key search (broker.selectors.queries.key_match, the message search and
            # GET /api/v1/messages?topic&key): a message of one key by equality, one of several
            # by its keys' array. Messages without keys (most half and every Op message) are in
            # neither, so they cost the send path nothing here.
            models.Index(fields=["keys"], name="message_keys", condition=~Q(keys="")),
            GinIndex(keys_array(), name="message_multi_keys", condition=MULTI_KEYS),
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["store_timestamp"], name="message_store_time"),
            # A receive with a tag filter (broker.services.consumption.receive): a queue's
            # messages of one tag in queue order, so the filter reads only what it delivers.
            models.Index(
                fields=["topic", "queue_id", "tags", "queue_offset"],
                name="message_queue_tag",
                condition=~Q(tags=""),
            ),
            # The message search by topic and time (broker.selectors.message_search).
            models.Index(fields=["topic", "store_timestamp"], name="message_topic_store_time"),
            # A FIFO message group's messages in queue order (the messages waiting behind a
            # blocked head, broker.selectors.blocked_message_groups); normal messages are not
            # in it, so it costs their sends nothing.
            models.Index(
                fields=["topic", "queue_id", "message_group", "queue_offset"],
                name="message_group_order",
                condition=~Q(message_group=""),
            ),
            # The message search by FIFO message group: only FIFO messages are in it, so the
            # other sends cost it nothing.
            models.Index(
                fields=["message_group", "store_timestamp"],
                name="message_group_store_time",
                condition=~Q(message_group=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic}#{self.queue_id}@{self.queue_offset} {self.msg_id}"

"""Consumption (RocketMQ 5 SimpleConsumer): connected clients, consumer offsets, deliveries and their journal."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from broker.models.commitlog import Message
from broker.rules.clock import now_ms


class ClientConnection(models.Model):
    """A RocketMQ 5 client seen over gRPC, by its ``x-mq-client-id`` (RocketMQ's
    ``ClientChannelInfo`` of ProducerManager / ConsumerManager, rocketmq-dashboard's connection
    lists).

    Written when its telemetry stream sends settings, on each heartbeat and when it ends
    (stream closed or NotifyClientTermination: ``disconnected_timestamp``). ``server`` names
    the gRPC server process holding its telemetry stream, where its back-checks are written.
    A client is live while connected and heard from within ``HALFMOON_GRPC_CLIENT_EXPIRY_MS``.
    """

    class Kind(models.TextChoices):
        PRODUCER = "PRODUCER"
        PUSH_CONSUMER = "PUSH_CONSUMER"
        SIMPLE_CONSUMER = "SIMPLE_CONSUMER"
        OTHER = "OTHER"

    client_id = models.CharField(max_length=255, primary_key=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.OTHER)
    language = models.CharField(max_length=32, blank=True, default="")
    version = models.CharField(max_length=64, blank=True, default="")
    host = models.CharField(max_length=255, blank=True, default="", help_text="Peer address")
    access_key = models.CharField(max_length=127, blank=True, default="", help_text="Key name")
    producer_groups = models.JSONField(default=list, blank=True)
    consumer_group = models.CharField(max_length=127, blank=True, default="")
    topics = models.JSONField(default=list, blank=True)
    server = models.CharField(max_length=255, blank=True, default="")
    connected_timestamp = models.BigIntegerField(default=now_ms)
    last_heartbeat_timestamp = models.BigIntegerField(default=now_ms)
    disconnected_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-connected_timestamp", "client_id"]
        indexes = [
            models.Index(
                fields=["consumer_group"],
                condition=Q(disconnected_timestamp__isnull=True),
                name="client_connected_consumer",
            ),
            models.Index(
                fields=["kind", "last_heartbeat_timestamp"],
                condition=Q(disconnected_timestamp__isnull=True),
                name="client_connected_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.client_id} {self.kind}"


class ConsumerOffset(models.Model):
    """Next queue offset a consumer group has not yet taken from a queue (RocketMQ
    ConsumerOffsetManager). Also holds the half/Op scan checkpoints of ``CID_RMQ_SYS_TRANS``."""

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    offset = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["consumer_group", "topic", "queue_id"], name="one_consumer_offset"
            )
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.topic}#{self.queue_id}@{self.offset}"


class Delivery(models.Model):
    """A message handed to a consumer group and not yet acked (SimpleConsumer in-flight)."""

    consumer_group = models.CharField(max_length=127)
    message = models.ForeignKey(Message, on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=127)
    delivery_attempt = models.PositiveIntegerField(default=1)
    invisible_until_timestamp = models.BigIntegerField()
    receipt_handle = models.CharField(max_length=64, unique=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["consumer_group", "message"], name="one_delivery_per_group"
            )
        ]
        indexes = [
            # messages_receive looks for expired deliveries of a group and topic.
            models.Index(
                fields=["consumer_group", "topic", "invisible_until_timestamp"],
                name="delivery_expiry",
            )
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.message_id} #{self.delivery_attempt}"


class DeliveryEvent(models.Model):
    """The delivery journal: every message handed to a consumer group (each attempt), acked, or
    moved to the group's DLQ. Append-only and keyed by values, not foreign keys, so it outlives
    the in-flight ``Delivery`` row (deleted on ack) and the message itself once pruned; the
    archive exports it and the reconciliation reads deliveries per consumer group from it."""

    class Kind(models.TextChoices):
        DELIVERED = "delivered"  # handed to a receiver (delivery_attempt says which time)
        ACKED = "acked"
        DEAD_LETTERED = "dead_lettered"  # past max_delivery_attempts, copied to %DLQ%{group}
        # made visible again to the group by an operator (an offset reset back in time, a
        # resend, a dead letter resent): the next receive hands it out as attempt 1
        REDELIVERY = "redelivery"

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    queue_offset = models.BigIntegerField()
    commit_log_offset = models.BigIntegerField(help_text="The message's commit log offset")
    msg_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    delivery_attempt = models.PositiveIntegerField(default=1)
    timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        indexes = [
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["timestamp"], name="delivery_event_time"),
            # The transaction timeline reads the deliveries of one delivered message.
            models.Index(fields=["commit_log_offset"], name="delivery_event_message"),
            # The dlq_growing alert reads a window of dead letters per consumer group.
            models.Index(
                fields=["consumer_group", "timestamp"],
                condition=Q(kind="dead_lettered"),
                name="delivery_event_dead_letters",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.kind} {self.msg_id}"


class FifoTaken(models.Model):
    """A message a FIFO consumer group took at or past its offset of the message's queue (in
    flight, acked or dead-lettered): the offset cannot pass a blocked message group's head, so
    what was taken beyond it is remembered here until the offset passes it
    (``broker.services.consumption.fifo_take``; docs/design.md, "FIFO message groups")."""

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    queue_offset = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["consumer_group", "topic", "queue_id", "queue_offset"],
                name="one_fifo_taken_per_offset",
            )
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.topic}#{self.queue_id}@{self.queue_offset}"

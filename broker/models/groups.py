"""Producer and consumer groups (RocketMQ's producer group and consumer group configs)."""

from __future__ import annotations

from django.db import models

from broker.rules.clock import now_ms


class ProducerGroup(models.Model):
    """A producer group; its ``check_url`` answers back-checks, or its producers poll for them."""

    name = models.CharField(max_length=127, unique=True)
    check_url = models.URLField(max_length=2048, null=True, blank=True)
    check_secret = models.CharField(max_length=128, help_text="HMAC-SHA256 key of back-checks")
    created_timestamp = models.BigIntegerField(default=now_ms)
    unreachable_since = models.BigIntegerField(
        null=True, blank=True, help_text="First undelivered check since the last delivered one"
    )
    last_check_error = models.CharField(max_length=512, blank=True, default="")
    last_poll_timestamp = models.BigIntegerField(null=True, blank=True)
    check_failures = models.PositiveIntegerField(
        default=0, help_text="Consecutive checks that timed out or could not be delivered"
    )
    check_backoff_until = models.BigIntegerField(
        null=True, blank=True, help_text="No checks to this group before this time (ms)"
    )
    unanswered_since = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="First check round with no answer in time since the last answered one (ms)",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ConsumerGroup(models.Model):
    """A consumer group (RocketMQ SubscriptionGroupConfig: retryMaxTimes)."""

    name = models.CharField(max_length=127, unique=True)
    max_delivery_attempts = models.PositiveIntegerField(default=16)
    fifo = models.BooleanField(
        default=False, db_default=False, help_text="Consume each message group in send order"
    )
    created_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Subscription(models.Model):
    """A consumer group's filter of a topic (RocketMQ ``SubscriptionData``: expression type and
    expression): the last one its consumers received with (a receive's filter, a gRPC
    client's telemetry settings). Shown with the group; the console's message page reads it to
    say where a group's filter rejected a message."""

    class ExpressionType(models.TextChoices):
        TAG = "TAG"
        SQL92 = "SQL92"

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    expression_type = models.CharField(
        max_length=8, choices=ExpressionType.choices, default=ExpressionType.TAG
    )
    expression = models.TextField(default="*")
    updated_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["consumer_group", "topic"]
        constraints = [
            models.UniqueConstraint(fields=["consumer_group", "topic"], name="one_subscription")
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.topic} {self.expression_type} {self.expression}"

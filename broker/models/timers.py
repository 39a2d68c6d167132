"""Delay and timer messages (RocketMQ 5 TimerMessageStore): each one's due time and fate."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from broker.rules.clock import now_ms


class ScheduledMessage(models.Model):
    """A delay or timer message waiting for its time, and what became of it.

    The message itself is stored when sent, on ``RMQ_SYS_WHEEL_TIMER`` (``commit_log_offset``,
    with ``REAL_TOPIC``/``REAL_QID`` and ``TIMER_DELIVER_MS``), invisible to every consumer;
    this row is its index entry, written in the same database transaction. When due, the
    broker's timer (``broker.services.timers.deliver``) copies it to ``(topic, queue_id)`` and
    marks it DELIVERED with the copy's offset, in one database transaction; a recall marks a
    SCHEDULED one RECALLED, and it is never delivered.
    """

    class State(models.TextChoices):
        SCHEDULED = "SCHEDULED"
        DELIVERED = "DELIVERED"
        RECALLED = "RECALLED"

    commit_log_offset = models.BigIntegerField(
        primary_key=True, help_text="Of the stored message on RMQ_SYS_WHEEL_TIMER"
    )
    msg_id = models.CharField(max_length=64, help_text="UNIQ_KEY")
    topic = models.CharField(max_length=127, help_text="The real topic")
    queue_id = models.PositiveIntegerField(help_text="The real queue")
    tags = models.CharField(max_length=255, blank=True, default="")
    keys = models.CharField(max_length=1024, blank=True, default="")
    producer_group = models.CharField(max_length=127, blank=True, default="")
    delivery_timestamp = models.BigIntegerField(help_text="Due (ms): TIMER_DELIVER_MS")
    state = models.CharField(max_length=16, choices=State.choices, default=State.SCHEDULED)
    scheduled_timestamp = models.BigIntegerField(default=now_ms, help_text="Stored (ms)")
    delivered_commit_log_offset = models.BigIntegerField(
        null=True, blank=True, unique=True, help_text="The copy on the real topic"
    )
    ended_timestamp = models.BigIntegerField(
        null=True, blank=True, help_text="Delivered or recalled (ms)"
    )
    recalled_by = models.CharField(max_length=160, blank=True, default="")
    recall_reason = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        indexes = [
            # The timer's next due messages, and the earliest due time it sleeps until.
            models.Index(
                fields=["delivery_timestamp", "commit_log_offset"],
                name="scheduled_due",
                condition=Q(state="SCHEDULED"),
            ),
            models.Index(fields=["topic", "msg_id"], name="scheduled_topic_msg_id"),
            models.Index(fields=["msg_id"], name="scheduled_msg_id"),
        ]

    def __str__(self) -> str:
        return f"{self.topic} {self.msg_id} due {self.delivery_timestamp} {self.state}"

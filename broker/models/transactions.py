"""Transactional messages' derived state and journals: a transaction, its resolution (one per half message, behind its Op message), its events and its back-check requests."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from broker.rules.clock import now_ms
from broker.rules.states import ResolutionAction, ResolvedBy, TransactionState


class Transaction(models.Model):
    """Derived state of one transactional message, keyed by its transaction id (= UNIQ_KEY).

    Everything here follows from the half message, its Op message and the check events; it is
    kept so that the scan finds due checks with one index read instead of re-reading history.
    """

    transaction_id = models.CharField(max_length=64, primary_key=True)
    producer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127, help_text="REAL_TOPIC")
    queue_id = models.PositiveIntegerField(help_text="REAL_QID")
    tags = models.CharField(max_length=255, blank=True, default="")
    keys = models.CharField(max_length=1024, blank=True, default="")
    half_queue_id = models.PositiveIntegerField()
    half_queue_offset = models.BigIntegerField()
    half_commit_log_offset = models.BigIntegerField()
    state = models.CharField(
        max_length=16, choices=TransactionState.choices, default=TransactionState.PREPARED
    )
    check_times = models.PositiveIntegerField(default=0, help_text="Checks delivered")
    check_immunity_ms = models.BigIntegerField(help_text="Delay of the first check after birth")
    born_timestamp = models.BigIntegerField()
    next_check_timestamp = models.BigIntegerField(null=True, blank=True)
    last_check_timestamp = models.BigIntegerField(null=True, blank=True)
    undelivered_checks = models.PositiveIntegerField(
        default=0, help_text="Consecutive checks that could not be delivered (backoff)"
    )
    resolved_timestamp = models.BigIntegerField(null=True, blank=True)
    resolved_by = models.CharField(max_length=16, choices=ResolvedBy.choices, null=True, blank=True)
    queue_offset = models.BigIntegerField(null=True, blank=True, help_text="Delivered queue offset")
    discard_reason = models.CharField(max_length=32, blank=True, default="")
    producer_client_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The RocketMQ client (x-mq-client-id) that sent the half message over gRPC; "
        "empty over HTTP. Its checks go over telemetry.",
    )

    class Meta:
        ordering = ["born_timestamp", "transaction_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["half_queue_id", "half_queue_offset"],
                name="one_transaction_per_half_offset",
            ),
            models.CheckConstraint(
                condition=Q(state__in=TransactionState.values), name="transaction_state_valid"
            ),
            models.CheckConstraint(
                condition=(Q(state="PREPARED", resolved_by__isnull=True))
                | (
                    Q(
                        state__in=["COMMITTED", "ROLLED_BACK"],
                        resolved_by__in=["producer", "check", "operator"],
                    )
                )
                | Q(state="DISCARDED", resolved_by="discard"),
                name="transaction_resolved_by_matches_state",
            ),
            models.CheckConstraint(
                condition=~Q(state="COMMITTED") | Q(queue_offset__isnull=False),
                name="committed_transaction_has_queue_offset",
            ),
        ]
        indexes = [
            # The back-check scan (broker.services.checks.check_round) reads this one.
            models.Index(
                fields=["half_queue_id", "next_check_timestamp"],
                condition=Q(state="PREPARED"),
                name="transaction_due_checks",
            ),
            # The scan checkpoint (broker.services.checks.checkpoint_advance) reads this one.
            models.Index(
                fields=["half_queue_id", "half_queue_offset"],
                condition=Q(state="PREPARED"),
                name="transaction_pending_offset",
            ),
            models.Index(fields=["producer_group", "state"], name="transaction_group_state"),
            models.Index(fields=["topic", "state"], name="transaction_topic_state"),
            models.Index(fields=["state", "born_timestamp"], name="transaction_state_born"),
            # The console's overview (broker.selectors.overview) reads the last hour's ends.
            models.Index(fields=["resolved_timestamp"], name="transaction_resolved_time"),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.state}"


class Resolution(models.Model):
    """The one resolution (commit or rollback) of a transaction, behind its Op message.

    The unique constraints make a double resolution impossible: one per transaction and one per
    half queue offset (RocketMQ writes one Op message per resolved half offset).
    """

    Action = ResolutionAction

    transaction = models.OneToOneField(
        Transaction, on_delete=models.PROTECT, related_name="resolution"
    )
    half_queue_id = models.PositiveIntegerField()
    half_queue_offset = models.BigIntegerField()
    action = models.CharField(max_length=8, choices=Action.choices)
    resolved_by = models.CharField(max_length=16, choices=ResolvedBy.choices)
    reason = models.TextField(blank=True, default="")
    resolved_timestamp = models.BigIntegerField(default=now_ms)
    op_commit_log_offset = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Commit log offset of the Op message naming this half offset",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["half_queue_id", "half_queue_offset"], name="one_resolution_per_half_offset"
            )
        ]
        indexes = [
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["resolved_timestamp"], name="resolution_time"),
            # The Op flusher (broker.services.transactions.op_messages.op_flush) and the scan checkpoint read these.
            models.Index(
                fields=["half_queue_id", "half_queue_offset"],
                condition=Q(op_commit_log_offset__isnull=True),
                name="resolution_unflushed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.action} by {self.resolved_by}"


class TransactionEvent(models.Model):
    """The check and operator journal: every check delivered (with its answer) or not delivered,
    every discard, resume and operator resolution. Append-only and keyed by transaction id, not
    a foreign key, so it outlives the derived ``Transaction`` row it explains: the rebuild
    (``broker.services.recovery``) counts ``check_times`` from it."""

    class Kind(models.TextChoices):
        CHECK_SENT = "check_sent"
        CHECK_UNDELIVERED = "check_undelivered"
        DISCARDED = "discarded"
        RESUMED = "resumed"
        RESOLVED = "resolved"
        CHECK_REQUESTED = "check_requested"  # an operator's "check now" (not a check)
        # A producer's or check answer's commit/rollback refused (409) because the transaction
        # had already ended: journalled after the refusal (broker.services.transactions.half).
        END_REFUSED = "end_refused"

    transaction_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    timestamp = models.BigIntegerField(default=now_ms)
    check_times = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(
        max_length=24,
        blank=True,
        default="",
        help_text="check_sent: COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW, ACCEPTED (202) or TIMEOUT; "
        "discarded: its reason; resolved: COMMIT or ROLLBACK; check_requested: empty; "
        "end_refused: the refused end, COMMIT or ROLLBACK",
    )
    actor = models.CharField(
        max_length=160,
        blank=True,
        default="",
        help_text="Who: check, scan, operator:<access key name>, console:<username>",
    )
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["timestamp", "id"]
        indexes = [
            models.Index(fields=["transaction_id", "timestamp"], name="event_transaction_time"),
            models.Index(fields=["kind", "outcome"], name="event_kind_outcome"),
            # The console's overview (broker.selectors.overview) reads the last hour's discards.
            models.Index(fields=["kind", "timestamp"], name="event_kind_time"),
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["timestamp"], name="event_time"),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.kind}"


class CheckRequest(models.Model):
    """A back-check queued for a producer group without ``check_url``, handed to a poller."""

    transaction = models.ForeignKey(
        Transaction, on_delete=models.CASCADE, related_name="check_requests"
    )
    producer_group = models.CharField(max_length=127)
    created_timestamp = models.BigIntegerField(default=now_ms)
    delivered_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["transaction"],
                condition=Q(delivered_timestamp__isnull=True),
                name="one_queued_check_request",
            )
        ]
        indexes = [
            # check_requests_poll reads the queued requests of one group.
            models.Index(
                fields=["producer_group", "created_timestamp"],
                condition=Q(delivered_timestamp__isnull=True),
                name="check_request_queued",
            )
        ]

    def __str__(self) -> str:
        return f"check {self.transaction_id}"

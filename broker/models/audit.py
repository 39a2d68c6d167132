"""The operators' audit log: one entry per action and its frozen targets."""

from __future__ import annotations

from django.db import models

from broker.rules.clock import now_ms


class AuditEntry(models.Model):
    """One operator action, through the console or the API: who, when, what, why and with what
    result (``broker.services.operations.audit``). The operators' audit log, append-only.

    A single action (commit, rollback, resume-check, check-now of one transaction) is written
    once, in the same database transaction as the action it records (``state`` ``done``), or
    after a refusal (``state`` ``refused``, ``result`` says what ended the transaction), and
    never changes. A bulk action (``bulk-*``) is written at its preview with the frozen set of
    transactions it will change as its ``AuditTarget`` rows; afterwards only its progress
    fields change, forward only (``broker.services.operations.bulk``): ``state`` (previewed, queued,
    running, done), ``result``, ``processed``, ``counts``, ``applied_by``,
    ``applied_timestamp`` and ``finished_timestamp``. A consumer-group operation with a
    preview (``reset-offset``, ``skip-backlog``, ``resend-dead-letters``;
    ``broker.services.consumption``) is written at its preview with an empty
    ``reason``: the operator gives the reason when applying it, and it is set then, once,
    with its progress fields. Nothing deletes an entry.
    """

    class Via(models.TextChoices):
        CONSOLE = "console"
        API = "api"

    class Action(models.TextChoices):
        COMMIT = "commit"
        ROLLBACK = "rollback"
        RESUME_CHECK = "resume-check"
        CHECK_NOW = "check-now"
        BULK_COMMIT = "bulk-commit"
        BULK_ROLLBACK = "bulk-rollback"
        BULK_RESUME_CHECK = "bulk-resume-check"
        SILENCE_ALERT = "silence-alert"  # an alert silenced (broker.services.alerts.silences)
        EXPIRE_SILENCE = "expire-silence"  # a silence ended early
        # Consumer-group operations (broker.services.consumption): the first two are
        # previewed (scope: the frozen per-queue plan), then applied with the reason.
        RESET_OFFSET = "reset-offset"  # a group's offsets reset to a time
        SKIP_BACKLOG = "skip-backlog"  # a group's offsets moved to the queue ends
        RESEND_MESSAGE = "resend-message"  # one message delivered again to one group
        RESEND_DEAD_LETTER = "resend-dead-letter"  # one dead letter's original, to its group
        RESEND_DEAD_LETTERS = "resend-dead-letters"  # a frozen set of them (targets: the DLQ
        # copies, AuditTarget.commit_log_offset), run by a Celery task with live progress
        RECALL_MESSAGE = "recall-message"  # a scheduled message taken back before its time
        # the head of a FIFO consumer group's blocked message group, sent to %DLQ%{group}
        DEAD_LETTER_HEAD = "dead-letter-head"

    class State(models.TextChoices):
        DONE = "done"
        REFUSED = "refused"
        PREVIEWED = "previewed"
        QUEUED = "queued"
        RUNNING = "running"

    timestamp = models.BigIntegerField(default=now_ms)
    actor = models.CharField(
        max_length=160, help_text="operator:<access key name> (API) or console:<username>"
    )
    via = models.CharField(max_length=8, choices=Via.choices)
    action = models.CharField(max_length=24, choices=Action.choices)
    reason = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices)
    result = models.CharField(max_length=512, blank=True, default="", help_text="Summary")
    scope = models.JSONField(
        default=dict, blank=True, help_text="Bulk: the selection or the filter it was made from"
    )
    total = models.PositiveIntegerField(default=0, help_text="Transactions targeted")
    processed = models.PositiveIntegerField(default=0, help_text="Targets no longer pending")
    counts = models.JSONField(default=dict, blank=True, help_text="Targets by result")
    applied_by = models.CharField(max_length=160, blank=True, default="")
    applied_timestamp = models.BigIntegerField(null=True, blank=True)
    finished_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # The audit page (broker.selectors.audit) filters these, newest first.
            models.Index(fields=["actor", "-id"], name="audit_actor"),
            models.Index(fields=["action", "-id"], name="audit_action"),
            models.Index(fields=["timestamp"], name="audit_timestamp"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.actor} {self.action} ({self.state})"


class AuditTarget(models.Model):
    """One thing an audit entry acted on: a transaction (``transaction_id``) or, for the
    dead-letter resends, a dead letter (``commit_log_offset`` of its copy on ``%DLQ%{group}``,
    ``transaction_id`` ""), and what happened to it: ``done``, ``already_ended`` (``detail``
    says what ended it), ``failed`` (``detail.error``) or, for a frozen set not yet applied to
    it, ``pending``. ``result`` and ``detail`` change once, from ``pending`` to the outcome; a
    target that is no longer pending is never acted on again."""

    class Result(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        ALREADY_ENDED = "already_ended"
        FAILED = "failed"

    entry = models.ForeignKey(AuditEntry, on_delete=models.PROTECT, related_name="targets")
    transaction_id = models.CharField(
        max_length=64, blank=True, default="", help_text='The transaction ("" for a dead letter)'
    )
    commit_log_offset = models.BigIntegerField(
        null=True, blank=True, help_text="A dead letter: the commit log offset of its DLQ copy"
    )
    result = models.CharField(max_length=16, choices=Result.choices, default=Result.PENDING)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["entry", "transaction_id"],
                condition=~models.Q(transaction_id=""),
                name="one_audit_target",
            ),
            # Leading on the offset: also the index of a dead letter's resends
            # (broker.selectors.consumer_groups).
            models.UniqueConstraint(
                fields=["commit_log_offset", "entry"],
                condition=models.Q(commit_log_offset__isnull=False),
                name="one_audit_target_dead_letter",
            ),
            models.CheckConstraint(
                condition=models.Q(transaction_id="", commit_log_offset__isnull=False)
                | (~models.Q(transaction_id="") & models.Q(commit_log_offset__isnull=True)),
                name="audit_target_transaction_or_dead_letter",
            ),
        ]
        indexes = [
            models.Index(fields=["transaction_id", "-entry"], name="audit_target_transaction"),
            models.Index(fields=["entry", "result", "id"], name="audit_target_result"),
        ]

    def __str__(self) -> str:
        return f"#{self.entry_id} {self.transaction_id or self.commit_log_offset} {self.result}"

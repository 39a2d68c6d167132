"""The reconciliation's runs and what each found (anomalies, analytics)."""

from __future__ import annotations

from django.db import models

from broker.rules.clock import now_ms


class ReconciliationRun(models.Model):
    """One run of the reconciliation job (``broker.services.reconciliation.run``): the window of
    half message times it judged (``since_timestamp``..``until_timestamp``, ms), how far the
    archive reached (``as_of_timestamp``), its counts and, once finished, where its Parquet
    output lies. Anomalies beyond HALFMOON_RECONCILE_MAX_STORED_ANOMALIES are counted in
    ``anomaly_counts`` and kept only in the Parquet output.

    A SKIPPED run records a decision not to run (nothing archived yet, or nothing settled
    since the last run): ``reason`` says why and ``settles_timestamp`` when the oldest
    transaction not yet judged settles (None when there is none). Its window is the empty one
    the decision saw; with nothing archived, ``since``, ``until`` and ``as_of`` are None."""

    class State(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"

    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    trigger = models.CharField(max_length=160, help_text="command, beat, or console:<username>")
    since_timestamp = models.BigIntegerField(null=True, blank=True)
    until_timestamp = models.BigIntegerField(null=True, blank=True)
    as_of_timestamp = models.BigIntegerField(null=True, blank=True)
    started_timestamp = models.BigIntegerField(default=now_ms)
    finished_timestamp = models.BigIntegerField(null=True, blank=True)
    spark_master = models.CharField(max_length=255)
    output_uri = models.CharField(max_length=1024, blank=True, default="")
    params = models.JSONField(default=dict, help_text="The settings the run judged by")
    transactions = models.BigIntegerField(default=0, help_text="Transactions judged")
    states = models.JSONField(default=dict, help_text="Transactions by final state")
    anomaly_counts = models.JSONField(default=dict, help_text="Anomalies by kind (all of them)")
    anomalies_stored = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    reason = models.TextField(blank=True, default="", help_text="Why a skipped run did not run")
    settles_timestamp = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Skipped: when the oldest transaction not yet judged settles (ms)",
    )

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "-id"], name="reconciliation_run_state")]

    def __str__(self) -> str:
        return f"run {self.pk} {self.state}"


class ReconciliationAnomaly(models.Model):
    """One anomaly a reconciliation run found (``broker.rules.anomalies.AnomalyKind``), naming
    the transaction (or, for a delivery without a half message, the msg_id) and its evidence."""

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="anomalies")
    kind = models.CharField(max_length=32)
    transaction_id = models.CharField(max_length=64, blank=True, default="")
    msg_id = models.CharField(max_length=64, blank=True, default="")
    producer_group = models.CharField(max_length=127, blank=True, default="")
    topic = models.CharField(max_length=127, blank=True, default="")
    evidence = models.JSONField(default=dict)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "kind"], name="reconciliation_anomaly_kind")]

    def __str__(self) -> str:
        return f"{self.kind} {self.transaction_id or self.msg_id}"


class ReconciliationAnalytics(models.Model):
    """The analytics of a run per producer group, topic and hour of half message time: counts
    by final state, resolution latency percentiles (ms, half stored to end), the check-count
    histogram (``{"0": n, "1": n, ...}``), the discard rate (discarded / transactions) and how
    long the producer group was unreachable in that hour (ms)."""

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="analytics")
    producer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    hour_timestamp = models.BigIntegerField(help_text="Start of the hour (ms)")
    transactions = models.BigIntegerField(default=0)
    committed = models.BigIntegerField(default=0)
    rolled_back = models.BigIntegerField(default=0)
    discarded = models.BigIntegerField(default=0)
    pending = models.BigIntegerField(default=0)
    resolution_p50_ms = models.BigIntegerField(null=True, blank=True)
    resolution_p95_ms = models.BigIntegerField(null=True, blank=True)
    resolution_p99_ms = models.BigIntegerField(null=True, blank=True)
    check_histogram = models.JSONField(default=dict)
    discard_rate = models.FloatField(default=0.0)
    unreachable_ms = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["hour_timestamp", "producer_group", "topic"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "producer_group", "topic", "hour_timestamp"],
                name="one_analytics_row_per_run_group_topic_hour",
            )
        ]
        indexes = [
            models.Index(fields=["producer_group", "hour_timestamp"], name="analytics_group_hour")
        ]

    def __str__(self) -> str:
        return f"{self.producer_group} {self.topic} @{self.hour_timestamp}"

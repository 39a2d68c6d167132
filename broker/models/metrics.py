"""The scan's leases and the ``/metrics`` rollup of the journals."""

from __future__ import annotations

from django.db import models


class ScanLease(models.Model):
    """A lease on a piece of periodic work (one half queue's scan), held by one worker at a time
    and expiring if that worker dies."""

    name = models.CharField(max_length=64, primary_key=True)
    owner = models.CharField(max_length=128, blank=True, default="")
    expires_timestamp = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} -> {self.owner}"


class MetricWatermark(models.Model):
    """How far ``/metrics`` has folded one append-only journal into ``MetricRollup``: every row
    of ``source`` (``resolution``: ``Resolution``; ``event``: ``TransactionEvent``) with an id
    up to ``last_id`` is counted in the rollup, none above it (``broker.services.metrics``)."""

    source = models.CharField(max_length=16, primary_key=True)
    last_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.source} folded to {self.last_id}"


class MetricRollup(models.Model):
    """Running totals behind the ``/metrics`` counters, folded from the journals so a scrape
    reads what changed since the last one, not the whole history.

    ``source`` ``resolution``: ``kind`` is the resolved state (COMMITTED, ROLLED_BACK),
    ``label`` the topic, ``count`` the transactions, ``sum_ms`` their total time from half
    message to end (ms) and ``buckets`` the cumulative counts at or under each bound of
    ``FINISH_LATENCY_BUCKETS_S``. ``source`` ``event``: ``kind`` and ``label`` are a
    ``TransactionEvent``'s kind and outcome, ``producer_group`` its transaction's producer group
    ("" when that row is gone), ``count`` the events and ``last_timestamp`` the latest event's
    time (ms)."""

    source = models.ForeignKey(
        MetricWatermark, on_delete=models.CASCADE, related_name="rollups", db_column="source"
    )
    kind = models.CharField(max_length=24)
    label = models.CharField(max_length=127, blank=True, default="")
    count = models.BigIntegerField(default=0)
    sum_ms = models.BigIntegerField(default=0)
    buckets = models.JSONField(default=list, blank=True)
    producer_group = models.CharField(max_length=127, blank=True, default="")
    last_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "kind", "label", "producer_group"], name="one_metric_rollup"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.kind} {self.label}: {self.count}"

"""Django admin of the data pipeline's records (view-only): the archive's watermark and
segments, and the reconciliation's runs with their anomalies and analytics."""

from __future__ import annotations

from django.contrib import admin

# Halfmoon's own alerts: rules and receivers through their services, the rest view-only.
from broker import models
from broker.admin.base import (
    INLINE_ROWS,
    ReadOnlyAdmin,
    ReadOnlyInline,
)


@admin.register(models.ArchiveWatermark)
class ArchiveWatermarkAdmin(ReadOnlyAdmin):
    """How far the archive export (and the prune) have reached; view-only."""

    list_display = ["name", "archived_until_timestamp", "pruned_until_timestamp"]


@admin.register(models.ArchiveSegment)
class ArchiveSegmentAdmin(ReadOnlyAdmin):
    """The archived segments, with rows per table and export time; view-only."""

    list_display = ["start_timestamp", "end_timestamp", "uri", "duration_ms", "rows"]


class ReconciliationAnomalyInline(ReadOnlyInline):
    """A run's stored anomalies, on its page."""

    model = models.ReconciliationAnomaly
    fields = ["kind", "transaction_id", "msg_id", "producer_group", "topic", "evidence"]
    verbose_name_plural = f"anomalies (the first {INLINE_ROWS})"


class ReconciliationAnalyticsInline(ReadOnlyInline):
    """A run's analytics rows, on its page."""

    model = models.ReconciliationAnalytics
    fields = [
        f.name
        for f in models.ReconciliationAnalytics._meta.concrete_fields
        if f.name not in ("id", "run", "check_histogram")
    ]
    verbose_name_plural = f"analytics (the first {INLINE_ROWS} rows)"


@admin.register(models.ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdmin):
    """Reconciliation runs with their stored anomalies and analytics. The daily schedule is
    the periodic task ``halfmoon-reconcile`` (django-celery-beat's "Periodic tasks")."""

    list_display = [
        "id",
        "state",
        "trigger",
        "since_timestamp",
        "until_timestamp",
        "transactions",
        "anomalies_stored",
        "started_timestamp",
        "finished_timestamp",
    ]
    list_filter = ["state", "trigger"]
    inlines = [ReconciliationAnomalyInline, ReconciliationAnalyticsInline]


@admin.register(models.ReconciliationAnomaly)
class ReconciliationAnomalyAdmin(ReadOnlyAdmin):
    """Every stored anomaly of every run, filtered by kind; view-only."""

    list_display = ["run", "kind", "transaction_id", "msg_id", "producer_group", "topic"]
    list_filter = ["kind"]
    search_fields = ["transaction_id", "msg_id"]
    show_full_result_count = False


@admin.register(models.ReconciliationAnalytics)
class ReconciliationAnalyticsAdmin(ReadOnlyAdmin):
    """Every run's analytics per producer group, topic and hour; view-only."""

    list_display = ["run", "hour_timestamp", "producer_group", "topic", "transactions"]
    list_filter = ["producer_group"]

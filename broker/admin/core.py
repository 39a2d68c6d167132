"""Django admin of the commit log and derived state, view-only: messages, consume queues,
transactions, resolutions, events, check requests, offsets, deliveries, leases, metric
rollups and the audit log. They change only through the broker's services. The writable
admins are ``topology`` and ``access_keys``.
"""

from __future__ import annotations

from django.contrib import admin

from broker import models
from broker.admin.base import ReadOnlyAdmin


@admin.register(models.ConsumeQueue)
class ConsumeQueueAdmin(ReadOnlyAdmin):
    list_display = ["topic", "queue_id", "max_offset"]
    search_fields = ["topic"]


@admin.register(models.Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = [
        "commit_log_offset",
        "topic",
        "queue_id",
        "queue_offset",
        "msg_id",
        "tags",
        "store_timestamp",
    ]
    list_filter = ["topic"]
    search_fields = ["msg_id", "keys"]
    show_full_result_count = False


@admin.register(models.Transaction)
class TransactionAdmin(ReadOnlyAdmin):
    list_display = [
        "transaction_id",
        "producer_group",
        "topic",
        "state",
        "check_times",
        "born_timestamp",
    ]
    list_filter = ["state", "producer_group"]
    search_fields = ["transaction_id", "keys"]
    show_full_result_count = False


@admin.register(models.Resolution)
class ResolutionAdmin(ReadOnlyAdmin):
    list_display = [
        "transaction",
        "action",
        "resolved_by",
        "resolved_timestamp",
        "op_commit_log_offset",
    ]
    list_filter = ["action", "resolved_by"]


@admin.register(models.TransactionEvent)
class TransactionEventAdmin(ReadOnlyAdmin):
    list_display = ["transaction_id", "kind", "outcome", "check_times", "actor", "timestamp"]
    list_filter = ["kind", "outcome"]
    search_fields = ["transaction_id"]


@admin.register(models.CheckRequest)
class CheckRequestAdmin(ReadOnlyAdmin):
    list_display = ["transaction", "producer_group", "created_timestamp", "delivered_timestamp"]


@admin.register(models.ConsumerOffset)
class ConsumerOffsetAdmin(ReadOnlyAdmin):
    list_display = ["consumer_group", "topic", "queue_id", "offset"]
    search_fields = ["consumer_group", "topic"]


@admin.register(models.Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "consumer_group",
        "topic",
        "message",
        "delivery_attempt",
        "invisible_until_timestamp",
    ]


@admin.register(models.ScanLease)
class ScanLeaseAdmin(ReadOnlyAdmin):
    list_display = ["name", "owner", "expires_timestamp"]


@admin.register(models.MetricWatermark)
class MetricWatermarkAdmin(ReadOnlyAdmin):
    list_display = ["source", "last_id"]


@admin.register(models.MetricRollup)
class MetricRollupAdmin(ReadOnlyAdmin):
    list_display = ["source", "kind", "label", "producer_group", "count", "sum_ms"]
    list_filter = ["source", "kind"]


@admin.register(models.AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The operators' audit log: append-only, view-only here."""

    list_display = ["id", "timestamp", "actor", "via", "action", "state", "total", "result"]
    list_filter = ["action", "via", "state"]
    search_fields = ["actor", "reason"]


@admin.register(models.AuditTarget)
class AuditTargetAdmin(ReadOnlyAdmin):
    list_display = ["entry", "transaction_id", "commit_log_offset", "result"]
    list_filter = ["result"]
    search_fields = ["transaction_id"]


@admin.register(models.DeliveryEvent)
class DeliveryEventAdmin(ReadOnlyAdmin):
    """The delivery journal (deliveries, acks, dead letters): append-only."""

    list_display = [
        "id",
        "timestamp",
        "consumer_group",
        "kind",
        "topic",
        "queue_id",
        "queue_offset",
        "msg_id",
        "delivery_attempt",
    ]
    list_filter = ["kind"]
    search_fields = ["msg_id", "consumer_group"]
    show_full_result_count = False

"""Django admin for every model. Commit-log rows and derived state are read-only here: they
change only through the broker's services."""

from __future__ import annotations

from django.contrib import admin

from broker import models


class ReadOnlyAdmin(admin.ModelAdmin):
    """Stored messages and derived state: browse, never edit by hand."""

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(models.Topic)
class TopicAdmin(admin.ModelAdmin):
    list_display = ["name", "queue_nums", "system", "created_timestamp"]
    list_filter = ["system"]
    search_fields = ["name"]


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


@admin.register(models.ProducerGroup)
class ProducerGroupAdmin(admin.ModelAdmin):
    list_display = ["name", "check_url", "unreachable_since", "last_check_error"]
    search_fields = ["name"]
    readonly_fields = [
        "check_secret",
        "unreachable_since",
        "last_check_error",
        "last_poll_timestamp",
    ]


@admin.register(models.ConsumerGroup)
class ConsumerGroupAdmin(admin.ModelAdmin):
    list_display = ["name", "max_delivery_attempts", "created_timestamp"]
    search_fields = ["name"]


@admin.register(models.AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "token_prefix", "is_admin", "producer_groups", "consumer_groups"]
    search_fields = ["name"]
    readonly_fields = ["token_prefix", "token_hash"]


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

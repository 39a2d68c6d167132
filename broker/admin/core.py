"""Django admin for every model.

Topics, producer and consumer groups and access keys are written through the services of
``broker.services.topology.writes`` (``save_model``), so an object made here is the same as one made
through the API: a topic gets its consume queues, a producer group its ``check_secret``, an
access key a token whose SHA-256 alone is stored (the token is shown once, after creation).
Their forms run the services' own checks, so a bad value is a form error, not a 500. They are
not deleted here (history names them), except access keys (deleting one revokes it). Commit-log
rows and derived state are read-only: they change only through the broker's services.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest

# Halfmoon's own alerts: rules and receivers through their services, the rest view-only.
from broker import models
from broker.admin.base import (
    ReadOnlyAdmin,
    ServiceAdmin,
    adopt_saved,
    value_checked,
)
from broker.conf import conf
from broker.rules.grants import scope_description
from broker.selectors.grants import operator_scope
from broker.services.access.grants import operator_grants_set
from broker.services.access.secrets import access_key_secret_clear, access_key_secret_set
from broker.services.topology.writes import (
    access_key_create,
    access_key_groups_validate,
    access_key_update,
    check_url_validate,
    consumer_group_create,
    consumer_group_update,
    group_name_validate,
    max_delivery_attempts_validate,
    producer_group_create,
    producer_group_update,
    queue_nums_validate,
    topic_create,
    topic_name_validate,
    topic_update,
)


class TopicForm(forms.ModelForm):
    class Meta:
        model = models.Topic
        fields = ["name", "queue_nums"]

    def clean_name(self) -> str:
        return value_checked(self.cleaned_data["name"], topic_name_validate)

    def clean_queue_nums(self) -> int:
        current = None if self.instance._state.adding else self.instance.queue_nums
        return value_checked(
            self.cleaned_data["queue_nums"], lambda n: queue_nums_validate(n, current=current)
        )


@admin.register(models.Topic)
class TopicAdmin(ServiceAdmin):
    """Topics: created with their consume queues; queues may be added, never removed. System
    topics (the broker's own) are view-only."""

    form = TopicForm
    fields = ["name", "queue_nums"]
    change_readonly_fields = ("name", "system", "created_timestamp")
    list_display = ["name", "queue_nums", "system", "created_timestamp"]
    list_filter = ["system"]
    search_fields = ["name"]

    def has_change_permission(self, request: HttpRequest, obj: models.Topic | None = None) -> bool:
        return super().has_change_permission(request, obj) and not (obj and obj.system)

    def save_model(
        self, request: HttpRequest, obj: models.Topic, form: forms.ModelForm, change: bool
    ) -> None:
        write = topic_update if change else topic_create
        adopt_saved(obj, write(name=obj.name, queue_nums=obj.queue_nums))


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


class GroupForm(forms.ModelForm):
    """A new producer or consumer group's name passes the services' group-name check."""

    group_kind = "group"

    def clean_name(self) -> str:
        return value_checked(
            self.cleaned_data["name"], lambda n: group_name_validate(self.group_kind, n)
        )


class ProducerGroupForm(GroupForm):
    group_kind = "producer group"
    check_url = forms.URLField(
        max_length=2048,
        required=False,
        assume_scheme="http",
        help_text="Where back-checks are sent; empty: this group's producers poll for them.",
    )

    class Meta:
        model = models.ProducerGroup
        fields = ["name", "check_url"]

    def clean_check_url(self) -> str:
        """The services' check-target rule (``check_url_validate``), as a field error."""
        return value_checked(self.cleaned_data["check_url"], check_url_validate)


@admin.register(models.ProducerGroup)
class ProducerGroupAdmin(ServiceAdmin):
    """Producer groups: created with a random ``check_secret`` (shown on the change page, for
    the producer's signature check); a new ``check_url`` clears the unreachable state."""

    form = ProducerGroupForm
    fields = ["name", "check_url"]
    change_readonly_fields = (
        "name",
        "check_secret",
        "unreachable_since",
        "last_check_error",
        "last_poll_timestamp",
    )
    list_display = ["name", "check_url", "unreachable_since", "last_check_error"]
    search_fields = ["name"]

    def save_model(
        self, request: HttpRequest, obj: models.ProducerGroup, form: forms.ModelForm, change: bool
    ) -> None:
        write = producer_group_update if change else producer_group_create
        adopt_saved(obj, write(name=obj.name, check_url=obj.check_url))


class ConsumerGroupForm(GroupForm):
    group_kind = "consumer group"

    class Meta:
        model = models.ConsumerGroup
        fields = ["name", "max_delivery_attempts"]

    def clean_max_delivery_attempts(self) -> int:
        return value_checked(
            self.cleaned_data["max_delivery_attempts"], max_delivery_attempts_validate
        )


@admin.register(models.ConsumerGroup)
class ConsumerGroupAdmin(ServiceAdmin):
    form = ConsumerGroupForm
    fields = ["name", "max_delivery_attempts"]
    change_readonly_fields = ("name", "created_timestamp")
    list_display = ["name", "max_delivery_attempts", "created_timestamp"]
    search_fields = ["name"]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """A new group's attempts default to ``HALFMOON_MAX_DELIVERY_ATTEMPTS``."""
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("max_delivery_attempts", conf.max_delivery_attempts)
        return initial

    def save_model(
        self, request: HttpRequest, obj: models.ConsumerGroup, form: forms.ModelForm, change: bool
    ) -> None:
        write = consumer_group_update if change else consumer_group_create
        adopt_saved(obj, write(name=obj.name, max_delivery_attempts=obj.max_delivery_attempts))


class GroupListField(forms.CharField):
    """Group names separated by commas or spaces; cleans to a sorted list without repeats."""

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value)
        return sorted(set(text.replace(",", " ").split()))

    def has_changed(self, initial: Any, data: Any) -> bool:
        return sorted(set(initial or [])) != self.to_python(data)


class AccessKeyForm(forms.ModelForm):
    producer_groups = GroupListField(
        required=False, help_text="Producer groups this key may send and end transactions for."
    )
    consumer_groups = GroupListField(
        required=False, help_text="Consumer groups this key may receive and ack for."
    )
    operator_producer_groups = GroupListField(
        required=False,
        help_text="Operator grants: producer groups whose transactions this key may resolve "
        "and resume (an admin key needs none).",
    )
    operator_consumer_groups = GroupListField(
        required=False,
        help_text="Operator grants: consumer groups this key may operate (an admin key needs "
        "none).",
    )

    class Meta:
        model = models.AccessKey
        fields = ["name", "is_admin", "producer_groups", "consumer_groups"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            scope = operator_scope(full=False, access_key_id=self.instance.pk)
            self.initial["operator_producer_groups"] = sorted(scope.producer_groups or ())
            self.initial["operator_consumer_groups"] = sorted(scope.consumer_groups or ())

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        value_checked(
            [
                *data.get("producer_groups", []),
                *data.get("consumer_groups", []),
                *data.get("operator_producer_groups", []),
                *data.get("operator_consumer_groups", []),
            ],
            access_key_groups_validate,
        )
        return data


@admin.register(models.AccessKey)
class AccessKeyAdmin(ServiceAdmin):
    """Access keys: the token is made by ``access_key_create`` and shown once, in a message
    after the key is saved; only its SHA-256 is stored. Deleting a key revokes it.

    A key's RocketMQ SecretKey (gRPC signatures, ``broker.services.access.secrets``) is
    made by an action and shown once, in a message; the admin shows only whether a key has one,
    never the secret or its ciphertext."""

    form = AccessKeyForm
    fields = [
        "name",
        "is_admin",
        "producer_groups",
        "consumer_groups",
        "operator_producer_groups",
        "operator_consumer_groups",
    ]
    change_readonly_fields = ("name", "token_prefix", "has_rocketmq_secret", "created_timestamp")
    list_display = [
        "name",
        "token_prefix",
        "is_admin",
        "producer_groups",
        "consumer_groups",
        "operator_of",
        "has_rocketmq_secret",
    ]
    search_fields = ["name"]
    actions = ["rocketmq_secret_set", "rocketmq_secret_clear"]

    @admin.display(description="Operator of")
    def operator_of(self, obj: models.AccessKey) -> str:
        """The key's operator grants in words (every group for an admin key)."""
        return scope_description(operator_scope(full=obj.is_admin, access_key_id=obj.pk))

    @admin.display(boolean=True, description="RocketMQ secret")
    def has_rocketmq_secret(self, obj: models.AccessKey) -> bool:
        return obj.secret_encrypted != ""

    @admin.action(description="Give the selected keys a new RocketMQ SecretKey (shown once)")
    def rocketmq_secret_set(self, request: HttpRequest, queryset: Any) -> None:
        for key in queryset:
            secret = access_key_secret_set(name=key.name)
            messages.success(
                request,
                f"The RocketMQ SecretKey of access key {key.name} (AccessKey {key.name}) is "
                f"{secret} . Copy it now: it is shown this once only (it is stored encrypted).",
            )

    @admin.action(description="Remove the selected keys' RocketMQ SecretKey")
    def rocketmq_secret_clear(self, request: HttpRequest, queryset: Any) -> None:
        names = [key.name for key in queryset]
        for name in names:
            access_key_secret_clear(name=name)
        messages.success(
            request,
            f"No RocketMQ SecretKey any more for {', '.join(names)}: their signed gRPC calls "
            "are refused.",
        )

    def has_delete_permission(
        self, request: HttpRequest, obj: models.AccessKey | None = None
    ) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def save_model(
        self, request: HttpRequest, obj: models.AccessKey, form: forms.ModelForm, change: bool
    ) -> None:
        rights = {
            "is_admin": form.cleaned_data["is_admin"],
            "producer_groups": form.cleaned_data["producer_groups"],
            "consumer_groups": form.cleaned_data["consumer_groups"],
        }
        grants = {
            "producer_groups": form.cleaned_data["operator_producer_groups"],
            "consumer_groups": form.cleaned_data["operator_consumer_groups"],
            "granted_by": f"admin:{request.user.get_username()}",
        }
        if change:
            with transaction.atomic():
                adopt_saved(obj, access_key_update(name=obj.name, **rights))
                operator_grants_set(access_key_id=obj.pk, **grants)
            return
        with transaction.atomic():
            key, token = access_key_create(name=obj.name, **rights)
            operator_grants_set(access_key_id=key.pk, **grants)
        adopt_saved(obj, key)
        messages.success(
            request,
            f"The token of access key {key.name} is {token} . Copy it now: it is shown this "
            "once only (only its SHA-256 is stored).",
        )


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
    list_display = ["entry", "transaction_id", "result"]
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

"""Django admin of access keys: created through ``access_key_create`` (the token is shown once,
after creation; only its SHA-256 is stored), their rights and operator grants checked by the
services, their RocketMQ SecretKey made by an action. Deleting a key revokes it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest

from broker import models
from broker.admin.base import ServiceAdmin, adopt_saved, value_checked
from broker.rules.grants import scope_description
from broker.selectors.grants import operator_scope
from broker.services.access.grants import operator_grants_set
from broker.services.access.secrets import access_key_secret_clear, access_key_secret_set
from broker.services.topology.writes import (
    access_key_create,
    access_key_groups_validate,
    access_key_update,
)


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

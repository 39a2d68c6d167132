"""Django admin for Halfmoon's own alerts (imported by ``broker.admin``).

Alert rules and receivers are written through ``broker.services.alerts`` (``save_model``,
``delete_model``), so one made here is the same as one made through the API or the console:
its values are the services' checks (form errors, never a 500), a receiver gets its random
secret and its webhook URL passes the check-target rule. Alerts, notifications and silences
are view-only: the evaluation writes the first two, operators silence from the console (with a
reason, in the audit log).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from broker import models
from broker.admin.base import ReadOnlyAdmin, ServiceAdmin, adopt_saved, value_checked
from broker.rules.alerts import AlertKind
from broker.services.alerts.receivers import (
    receiver_create,
    receiver_delete,
    receiver_target_validate,
    receiver_update,
)
from broker.services.alerts.rules import (
    CHANGEABLE,
    alert_kind_validate,
    alert_rule_create,
    alert_rule_delete,
    alert_rule_update,
    alert_rule_values_validate,
)
from broker.services.topology.writes import name_validate


class AlertRuleForm(forms.ModelForm):
    """An alert rule whose values pass ``alert_rule_values_validate`` (the group exists, the
    bounds hold) before anything is saved."""

    class Meta:
        model = models.AlertRule
        fields = ["name", "kind", *CHANGEABLE]

    def clean_name(self) -> str:
        return value_checked(self.cleaned_data["name"], lambda n: name_validate("alert rule", n))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("kind") or self.instance.kind
        values = {k: data[k] for k in CHANGEABLE if k in data}
        value_checked(kind, alert_kind_validate)
        value_checked(values, lambda v: alert_rule_values_validate(AlertKind(kind), v))
        return data


@admin.register(models.AlertRule)
class AlertRuleAdmin(ServiceAdmin):
    """Alert rules: made, changed and deleted through the services (a deleted rule's firing
    alerts resolve at once)."""

    form = AlertRuleForm
    fields = ["name", "kind", *CHANGEABLE]
    change_readonly_fields = ("name", "kind", "created_timestamp", "updated_timestamp")
    list_display = ["name", "kind", "group", "threshold", "window_s", "severity", "enabled"]
    list_filter = ["kind", "severity", "enabled"]
    search_fields = ["name", "group"]

    def has_delete_permission(
        self, request: HttpRequest, obj: models.AlertRule | None = None
    ) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def save_model(
        self, request: HttpRequest, obj: models.AlertRule, form: forms.ModelForm, change: bool
    ) -> None:
        values = {k: form.cleaned_data[k] for k in CHANGEABLE}
        if change:
            adopt_saved(obj, alert_rule_update(name=obj.name, **values))
        else:
            adopt_saved(obj, alert_rule_create(name=obj.name, kind=obj.kind, **values))

    def delete_model(self, request: HttpRequest, obj: models.AlertRule) -> None:
        alert_rule_delete(name=obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.AlertRule]) -> None:
        for name in queryset.values_list("name", flat=True):
            alert_rule_delete(name=name)


class AlertReceiverForm(forms.ModelForm):
    """A receiver whose target passes ``receiver_target_validate`` (a webhook URL the
    check-target rule allows, valid e-mail addresses)."""

    emails = forms.CharField(
        required=False, help_text="E-mail receivers: addresses separated by commas or spaces."
    )
    url = forms.CharField(required=False, max_length=2048)

    class Meta:
        model = models.AlertReceiver
        fields = ["name", "kind", "url", "emails", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and "emails" in self.fields:
            self.initial["emails"] = ", ".join(self.instance.emails)

    def clean_name(self) -> str:
        return value_checked(
            self.cleaned_data["name"], lambda n: name_validate("alert receiver", n)
        )

    def clean_emails(self) -> list[str]:
        return self.cleaned_data["emails"].replace(",", " ").split()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("kind") or self.instance.kind
        value_checked(
            (kind, data.get("url") or "", data.get("emails") or []),
            lambda v: receiver_target_validate(*v),
        )
        return data


@admin.register(models.AlertReceiver)
class AlertReceiverAdmin(ServiceAdmin):
    """Receivers: made with a random secret (shown on the change page, to verify the
    signature), changed and deleted through the services (a deleted receiver's pending
    notifications fail, shown in the console)."""

    form = AlertReceiverForm
    fields = ["name", "kind", "url", "emails", "enabled"]
    change_readonly_fields = ("name", "kind", "secret", "created_timestamp")
    list_display = ["name", "kind", "url", "enabled"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]

    def has_delete_permission(
        self, request: HttpRequest, obj: models.AlertReceiver | None = None
    ) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def save_model(
        self, request: HttpRequest, obj: models.AlertReceiver, form: forms.ModelForm, change: bool
    ) -> None:
        data = form.cleaned_data
        if change:
            saved = receiver_update(
                name=obj.name, url=data["url"], emails=data["emails"], enabled=data["enabled"]
            )
        else:
            saved = receiver_create(
                name=obj.name,
                kind=data["kind"],
                url=data["url"],
                emails=data["emails"],
                enabled=data["enabled"],
            )
        adopt_saved(obj, saved)

    def delete_model(self, request: HttpRequest, obj: models.AlertReceiver) -> None:
        receiver_delete(name=obj.name)

    def delete_queryset(
        self, request: HttpRequest, queryset: QuerySet[models.AlertReceiver]
    ) -> None:
        for name in queryset.values_list("name", flat=True):
            receiver_delete(name=name)


@admin.register(models.Alert)
class AlertAdmin(ReadOnlyAdmin):
    """Alerts, firing and resolved (written by the evaluation); view-only."""

    list_display = [
        "id",
        "rule_name",
        "subject",
        "severity",
        "state",
        "started_timestamp",
        "resolved_timestamp",
        "notified",
    ]
    list_filter = ["state", "severity", "kind"]
    search_fields = ["rule_name", "subject"]


@admin.register(models.AlertNotification)
class AlertNotificationAdmin(ReadOnlyAdmin):
    """Every notification with its delivery state (retry failed ones from the console)."""

    list_display = [
        "id",
        "alert",
        "event",
        "receiver_name",
        "state",
        "attempts",
        "last_error",
        "created_timestamp",
    ]
    list_filter = ["state", "event"]
    search_fields = ["receiver_name"]


@admin.register(models.AlertSilence)
class AlertSilenceAdmin(ReadOnlyAdmin):
    """Silences (set and ended from the console, with a reason in the audit log)."""

    list_display = ["id", "rule", "group", "starts_timestamp", "ends_timestamp", "created_by"]
    search_fields = ["group", "created_by", "reason"]

"""Operator grants in the Django admin (``broker.models.OperatorGrant``).

- Users: Django's user admin, with the console user's operator grants on its change page
  ("Operator of producer groups" / "consumer groups"): a user in the ``viewer`` group with
  grants is an operator of those groups only. Saved through ``broker.services.access.grants``.
- Access keys: on the key's own page (``broker.admin.access_keys.AccessKeyAdmin``).
- Every grant, by holder: a read-only list (``/admin/broker/operatorgrant/``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.db import transaction
from django.http import HttpRequest

from broker import models
from broker.admin.access_keys import GroupListField
from broker.admin.base import ReadOnlyAdmin, value_checked
from broker.rules.grants import scope_description
from broker.selectors.grants import operator_scope
from broker.services.access.grants import operator_grants_set
from broker.services.topology.writes import access_key_groups_validate

User = get_user_model()


class ConsoleUserChangeForm(UserChangeForm):
    """Django's user change form plus the user's operator grants."""

    operator_producer_groups = GroupListField(
        required=False,
        help_text="Operator grants: producer groups whose transactions this console user may "
        "commit, roll back, resume and check now. With the viewer role only: a full operator "
        "or an admin operates every group.",
    )
    operator_consumer_groups = GroupListField(
        required=False,
        help_text="Operator grants: consumer groups this console user may operate.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            scope = operator_scope(full=False, user_id=self.instance.pk)
            self.initial["operator_producer_groups"] = sorted(scope.producer_groups or ())
            self.initial["operator_consumer_groups"] = sorted(scope.consumer_groups or ())

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        value_checked(
            [*data.get("operator_producer_groups", []), *data.get("operator_consumer_groups", [])],
            access_key_groups_validate,
        )
        return data


class ConsoleUserAdmin(UserAdmin):
    """Django's user admin; the change page also edits the user's operator grants."""

    form = ConsoleUserChangeForm
    fieldsets = (
        *UserAdmin.fieldsets,
        (
            "Console operator grants",
            {"fields": ("operator_producer_groups", "operator_consumer_groups")},
        ),
    )
    list_display = (*UserAdmin.list_display, "operator_of")

    @admin.display(description="Operator of")
    def operator_of(self, obj: Any) -> str:
        """The user's operator grants in words ("" without grants)."""
        scope = operator_scope(full=False, user_id=obj.pk)
        return scope_description(scope) if scope.operates_any else ""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if "operator_producer_groups" in form.cleaned_data:
                operator_grants_set(
                    user_id=obj.pk,
                    producer_groups=form.cleaned_data["operator_producer_groups"],
                    consumer_groups=form.cleaned_data["operator_consumer_groups"],
                    granted_by=f"admin:{request.user.get_username()}",
                )


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, ConsoleUserAdmin)


@admin.register(models.OperatorGrant)
class OperatorGrantAdmin(ReadOnlyAdmin):
    """Every operator grant, browse only: they are set on the user's or the access key's
    page."""

    list_display = ["holder", "kind", "group", "granted_by", "granted_timestamp"]
    list_filter = ["kind"]
    search_fields = ["group", "user__username", "access_key__name"]
    list_select_related = ["user", "access_key"]

    @admin.display(description="Holder")
    def holder(self, obj: models.OperatorGrant) -> str:
        if obj.user_id:
            return f"console user {obj.user.get_username()}"
        return f"access key {obj.access_key.name}"

"""What the admin's model admins share: read-only admins, and admins that write through the
services (a service's error is a form error, never a 500)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import admin
from django.db.models import Model
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

# Halfmoon's own alerts: rules and receivers through their services, the rest view-only.
from broker.errors import HalfmoonError

T = TypeVar("T")


def value_checked(value: T, check: Callable[[T], None]) -> T:
    """``value`` once a service's ``check`` of it passes; the check's ``InvalidInput`` becomes
    the form field's error."""
    try:
        check(value)
    except HalfmoonError as exc:
        raise forms.ValidationError(exc.message, code=exc.code) from exc
    return value


def adopt_saved(obj: Model, saved: Model) -> None:
    """Make the admin's unsaved ``obj`` the row a service saved (primary key and every field),
    so the admin's log entry and redirect name the real object."""
    for field in obj._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False
    obj._state.db = saved._state.db


class ViewOnly:
    """No add, change or delete for anyone: a model admin or inline to browse only."""

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


class ReadOnlyAdmin(ViewOnly, admin.ModelAdmin):
    """Stored messages and derived state: browse, never edit by hand."""


class ServiceAdmin(admin.ModelAdmin):
    """A model written only through its services: ``fields`` on the add page, plus
    ``change_readonly_fields`` (the name, which history refers to, and what the broker keeps
    up to date) on the change page; never deleted here. Subclasses call the services in
    ``save_model``."""

    change_readonly_fields: tuple[str, ...] = ("name",)

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = list(self.fields or [])
        if obj is None:
            return fields
        return fields + [f for f in self.change_readonly_fields if f not in fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return list(self.change_readonly_fields) if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


INLINE_ROWS = 200  # a run page shows this many anomalies; the API and console page them all


class FirstRowsFormSet(BaseInlineFormSet):
    """An inline formset showing only the first ``INLINE_ROWS`` rows (a run may store 10,000
    anomalies: one admin page must not render them all)."""

    def get_queryset(self) -> Any:
        return super().get_queryset()[:INLINE_ROWS]


class ReadOnlyInline(ViewOnly, admin.TabularInline):
    """A view-only inline of the first ``INLINE_ROWS`` rows."""

    formset = FirstRowsFormSet
    extra = 0
    can_delete = False
    show_change_link = False

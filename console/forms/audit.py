"""The audit log's filter (``/console/audit/``), read from the URL: ``actor``, ``action``,
``via``, ``transaction_id``, ``since`` and ``until`` (UTC dates, ``until`` inclusive).
``audit_filters_of`` turns a valid form into the keyword arguments of
``broker.selectors.audit.audit_entries_matching`` (the page and the incident export)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms

from broker.models import AuditEntry

FILTERS = ("actor", "action", "via", "transaction_id", "since", "until")
"""The URL parameters of the filter."""


class AuditFilterForm(forms.Form):
    """The audit page's filter, from ``request.GET``."""

    actor = forms.CharField(required=False, max_length=160, label="Who")
    action = forms.ChoiceField(choices=[("", "any"), *AuditEntry.Action.choices], required=False)
    via = forms.ChoiceField(choices=[("", "any"), *AuditEntry.Via.choices], required=False)
    transaction_id = forms.CharField(required=False, max_length=64, label="Transaction id")
    since = forms.DateField(
        required=False, label="From (UTC)", widget=forms.DateInput({"type": "date"})
    )
    until = forms.DateField(
        required=False, label="To (UTC, inclusive)", widget=forms.DateInput({"type": "date"})
    )
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


def _day_ms(day: date | None, *, end: bool) -> int | None:
    """Midnight UTC starting ``day`` (the next day's, for an inclusive end), in ms."""
    if day is None:
        return None
    moment = datetime.combine(day, time(), tzinfo=UTC) + timedelta(days=1 if end else 0)
    return int(moment.timestamp() * 1000)


def audit_filters_of(form: AuditFilterForm) -> dict[str, Any]:
    """The keyword arguments of ``audit_entries_matching`` for a valid form: ``actor``,
    ``action``, ``via``, ``transaction_id``, ``since_ms``, ``until_ms``."""
    data = form.cleaned_data
    return {
        "actor": data["actor"],
        "action": data["action"],
        "via": data["via"],
        "transaction_id": data["transaction_id"],
        "since_ms": _day_ms(data["since"], end=False),
        "until_ms": _day_ms(data["until"], end=True),
    }

"""Console pages: the operators' audit log (``/console/audit/``), filterable in the URL
(``actor``, ``action``, ``via``, ``transaction_id``, ``since``, ``until`` as UTC dates),
newest first, keyset pages (``before=<entry id>``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import urlencode

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.models import AuditEntry
from broker.selectors.audit import BULK_ENTRY_ACTIONS, audit_entries
from console.permissions import ViewConsoleRequired

FILTERS = ("actor", "action", "via", "transaction_id", "since", "until")


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


class AuditView(ViewConsoleRequired, View):
    """GET ``/console/audit/``: the audit log, newest first; each entry links its
    transactions (and a bulk its page)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = AuditFilterForm(request.GET)
        status = 200
        if form.is_valid():
            data = form.cleaned_data
            page = audit_entries(
                actor=data["actor"],
                action=data["action"],
                via=data["via"],
                transaction_id=data["transaction_id"],
                since_ms=_day_ms(data["since"], end=False),
                until_ms=_day_ms(data["until"], end=True),
                before=data["before"],
            )
        else:
            page, status = None, 400
        pairs = [(k, v) for k in FILTERS for v in request.GET.getlist(k) if v]
        context = {
            "form": form,
            "page": page,
            "filter_query": urlencode(pairs),
            "bulk_actions": BULK_ENTRY_ACTIONS,
        }
        return render(request, "console/audit/list.html", context, status=status)


urlpatterns: list[URLPattern] = [path("audit/", AuditView.as_view(), name="audit")]

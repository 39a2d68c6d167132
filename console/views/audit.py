"""Console pages: the operators' audit log (``/console/audit/``), filterable in the URL
(``actor``, ``action``, ``via``, ``transaction_id``, ``since``, ``until`` as UTC dates),
newest first, keyset pages (``before=<entry id>``)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.selectors.audit import BULK_ENTRY_ACTIONS, audit_entries
from console.forms.audit import FILTERS, AuditFilterForm, audit_filters_of
from console.permissions import ViewConsoleRequired


class AuditView(ViewConsoleRequired, View):
    """GET ``/console/audit/``: the audit log, newest first; each entry links its
    transactions (and a bulk its page)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = AuditFilterForm(request.GET)
        status = 200
        if form.is_valid():
            page = audit_entries(**audit_filters_of(form), before=form.cleaned_data["before"])
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

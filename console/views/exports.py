"""Console: the incident export (``/console/export/``), a zip of the transactions a selection or
a filter names, with their timelines, audit entries and reconciliation anomalies
(``broker.services.operations.incident_export``). Every console user may export what they may view.

- GET ``?kind=stuck&<the stuck list's filter>``, ``?kind=messages&<the message search>``,
  ``?kind=audit&<the audit log's filter>``: the transactions of that filter;
- GET ``?transaction_id=<id>`` (repeatable) or POST ``transaction_id`` (the stuck list's
  selected rows): those transactions.

A filter that is not valid, or that names no transaction or too many, is the page it came from
with what was wrong (400)."""

from __future__ import annotations

from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import InvalidInput
from broker.rules.clock import now_ms
from broker.selectors.incident import IncidentScope
from broker.services.operations.incident_export import (
    incident_export_file,
    incident_export_filename,
)
from console.forms.audit import AuditFilterForm, audit_filters_of
from console.forms.messages import MessageSearchForm, message_query_fields
from console.forms.transactions import TransactionFilterForm, filters_from_form
from console.permissions import ViewConsoleRequired
from console.views.actions import console_actor


def _scope(request: HttpRequest) -> IncidentScope | str:
    """The scope the request names, or what is wrong with it."""
    data = request.POST if request.method == "POST" else request.GET
    ids = [t for t in data.getlist("transaction_id") if t]
    kind = data.get("kind", "selection" if ids else "")
    if kind == "selection":
        if not ids:
            return "Select at least one transaction to export."
        return IncidentScope(kind="selection", transaction_ids=tuple(dict.fromkeys(ids)))
    if kind == "stuck":
        form = TransactionFilterForm(data)
        if not form.is_valid():
            return f"The filter is not valid: {form.errors.as_text()}"
        filters = {**filters_from_form(form), "now": now_ms()}
        return IncidentScope(kind="stuck", filters=filters)
    if kind == "messages":
        form = MessageSearchForm(data)
        if not form.is_valid():
            return f"The search is not valid: {form.errors.as_text()}"
        return IncidentScope(kind="messages", filters=message_query_fields(form))
    if kind == "audit":
        form = AuditFilterForm(data)
        if not form.is_valid():
            return f"The filter is not valid: {form.errors.as_text()}"
        return IncidentScope(kind="audit", filters=audit_filters_of(form))
    return "Say what to export: kind=stuck, messages or audit with its filter, or transaction_id."


class IncidentExportView(ViewConsoleRequired, View):
    """``/console/export/``: the incident export as a download (see the module docstring)."""

    http_method_names = ["get", "post"]

    def get(self, request: HttpRequest) -> HttpResponse:
        scope = _scope(request)
        if isinstance(scope, str):
            return _refused(request, scope)
        try:
            out, _ = incident_export_file(scope=scope, actor=console_actor(request.user))
        except InvalidInput as exc:
            return _refused(request, exc.message)
        name = incident_export_filename(scope, now_ms())
        return FileResponse(out, as_attachment=True, filename=name, content_type="application/zip")

    post = get


def _refused(request: HttpRequest, message: str) -> HttpResponse:
    back = request.headers.get("Referer", "")
    context = {
        "message": message,
        "back": back if back.startswith(request.build_absolute_uri("/")) else "",
    }
    return render(request, "console/export_refused.html", context, status=400)


urlpatterns: list[URLPattern] = [
    path("export/", IncidentExportView.as_view(), name="export"),
]

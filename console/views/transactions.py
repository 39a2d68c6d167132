"""Console pages: the stuck-transaction list (with its live row partial) and one transaction's
page. Reads only, through ``broker.selectors.transactions``; viewers and up."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import NotFound
from broker.rules.clock import now_ms
from broker.rules.preview import body_preview
from broker.selectors.check_explanations import check_explanation_of_transaction
from broker.selectors.timeline import transaction_detail
from broker.selectors.transactions import StuckPage, stuck_page, stuck_row
from console.forms.transactions import TransactionFilterForm, filters_from_form
from console.permissions import ViewConsoleRequired
from console.views.check_explanations import check_panel

TABLE_TARGET = "tx-table"  # the id htmx targets to reload the table alone


def _query(pairs: list[tuple[str, str]], **extra: str | int) -> str:
    return urlencode([*pairs, *((k, str(v)) for k, v in extra.items())])


class TransactionListView(ViewConsoleRequired, View):
    """``/console/transactions/``: PREPARED and DISCARDED transactions, the most stuck first,
    filtered by the URL (``console.forms.transactions.TransactionFilterForm``), paged by keyset
    (``after`` / ``before``). An htmx request targeting ``#tx-table`` gets the table alone
    (the live resync). Invalid parameters: the page with the form's errors, status 400."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = TransactionFilterForm(request.GET)
        now = now_ms()
        page = StuckPage()
        status = 400
        per_page = 50
        if form.is_valid():
            per_page = form.cleaned_data["per_page"]
            page = stuck_page(
                filters_from_form(form),
                after=form.cleaned_data["after"],
                before=form.cleaned_data["before"],
                per_page=per_page,
                now=now,
            )
            status = 200
        pairs = form.filter_params()
        paging = {"per_page": per_page} if per_page != 50 else {}
        context = {
            "form": form,
            "page": page,
            "now": now,
            "filter_pairs": pairs,
            "filter_query": _query(pairs),
            "next_query": _query(pairs, after=page.next_cursor.encode(), **paging)
            if page.next_cursor
            else "",
            "prev_query": _query(pairs, before=page.prev_cursor.encode(), **paging)
            if page.prev_cursor
            else "",
            "is_last_page": page.next_cursor is None,
            "is_first_page": page.prev_cursor is None,
        }
        template = "console/transactions/list.html"
        if request.headers.get("HX-Request") and request.headers.get("HX-Target") == TABLE_TARGET:
            template = "console/transactions/_table.html"
        return render(request, template, context, status=status)


class TransactionRowView(ViewConsoleRequired, View):
    """``/console/transactions/<id>/row/?<filter>``: the transaction's ``<tr>`` in the stuck
    list if it matches the filter, else 204 (the page removes the row). 400 for a bad filter."""

    def get(self, request: HttpRequest, transaction_id: str) -> HttpResponse:
        form = TransactionFilterForm(request.GET)
        if not form.is_valid():
            return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
        now = now_ms()
        row = stuck_row(transaction_id, filters_from_form(form), now=now)
        if row is None:
            return HttpResponse(status=204)
        return render(
            request,
            "console/transactions/_row.html",
            {"row": row, "now": now},
        )


class TransactionDetailView(ViewConsoleRequired, View):
    """``/console/transactions/<id>/``: state, body preview, properties and the timeline."""

    def get(self, request: HttpRequest, transaction_id: str) -> HttpResponse:
        try:
            detail = transaction_detail(transaction_id)
        except NotFound:
            raise Http404(f"No transaction {transaction_id}") from None
        half = detail.half
        preview = body_preview(bytes(half.body), is_text=half.body_is_text) if half else None
        explained = check_explanation_of_transaction(detail.tx.transaction_id)
        context = {
            "d": detail,
            "tx": detail.tx,
            "preview": preview,
            "properties": sorted((half.properties or {}).items()) if half else [],
            "now": now_ms(),
            "panel": check_panel(explained.explanation),
            "api_path": f"GET /api/v1/transactions/{detail.tx.transaction_id}/check-explanation",
        }
        return render(request, "console/transactions/detail.html", context)


urlpatterns: list[URLPattern] = [
    path("transactions/", TransactionListView.as_view(), name="transactions"),
    path("transactions/<str:transaction_id>/", TransactionDetailView.as_view(), name="transaction"),
    path(
        "transactions/<str:transaction_id>/row/",
        TransactionRowView.as_view(),
        name="transaction_row",
    ),
]

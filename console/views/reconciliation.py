"""Console pages: the reconciliation runs (``/console/reconciliation/``), one run with its
anomalies and charts (``/console/reconciliation/<id>/``), and "Run now" for operators.

Reads come from ``broker.selectors.reconciliation``; "Run now" queues the pipeline worker's
task through ``broker.services.reconciliation.run.reconciliation_run_queue`` (the run records the
operator as its trigger, ``console:<username>``; with nothing settled the service records a
SKIPPED run whose reason the list shows as the latest decision). Each anomaly's transaction id links to the
transaction's console page (its timeline) while the database still holds the transaction;
one pruned after archiving, or a delivery with no half message (``msg_id`` only), is shown
as text.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import NotFound
from broker.rules.anomalies import AnomalyKind
from broker.rules.audit import iso_utc
from broker.rules.durations import duration_text
from broker.selectors.reconciliation import (
    producer_group_analytics,
    reconciliation_analytics,
    reconciliation_anomalies,
    reconciliation_charts,
    reconciliation_run_get,
    reconciliation_runs_page,
    transactions_present,
)
from broker.selectors.scheduled_messages import scheduled_messages_present
from broker.services.reconciliation.run import reconciliation_run_queue
from console.permissions import OperateConsoleRequired, ViewConsoleRequired
from console.views.actions import console_actor

RUNS_PER_PAGE = 50
ANOMALIES_PER_PAGE = 100
LISTED_EVIDENCE_IDS = "unexplained_transaction_ids"  # bucket_mismatch: ids that get links


class RunsFilterForm(forms.Form):
    """The runs list's paging: ``before`` (a run id; older runs)."""

    before = forms.IntegerField(required=False, min_value=1)


class AnomalyFilterForm(forms.Form):
    """A run page's anomaly filter and page: ``kind`` (one ``AnomalyKind``), ``page``."""

    kind = forms.ChoiceField(choices=[("", "every kind"), *AnomalyKind.choices], required=False)
    page = forms.IntegerField(required=False, min_value=1)


class ReconciliationListView(ViewConsoleRequired, View):
    """GET ``/console/reconciliation/``: the runs, newest first (state, window, transactions
    by final state, anomalies by kind, duration), 50 a page (``?before=<run id>``)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = RunsFilterForm(request.GET)
        if not form.is_valid():
            context = {"form": form, "page": None}
            return render(request, "console/reconciliation/list.html", context, status=400)
        page = reconciliation_runs_page(before=form.cleaned_data["before"], per_page=RUNS_PER_PAGE)
        context = {"form": form, "page": page, "kinds": AnomalyKind}
        return render(request, "console/reconciliation/list.html", context)


def evidence_text(key: str, value: Any) -> str:
    """An evidence value as an operator reads it: a time (a key ending ``_timestamp``,
    ``_start_ms`` or ``_end_ms``, or ``as_of``; ms since the epoch) in ISO-8601 UTC, another
    ``_ms`` span as a duration, a list comma-separated, anything else as is."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        if key == "as_of" or key.endswith(("_timestamp", "_start_ms", "_end_ms")):
            return iso_utc(value)
        if key.endswith("_ms"):
            return f"{duration_text(value)} ({value} ms)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def anomaly_rows(anomalies: list[Any]) -> list[dict[str, Any]]:
    """The page's anomalies (``ReconciliationAnomaly`` rows) with what the template shows: ``label`` (the kind's meaning),
    ``linked`` (the transaction is in the database, so its page exists), ``evidence`` as
    ``(key, text)`` pairs (``evidence_text``) and, for a bucket's mismatch, its unexplained
    transaction ids as ``(id, linked)`` pairs; for a scheduled_undelivered,
    ``scheduled_offset``: its scheduled message's commit log offset while the database holds
    its row (its console page), else None. Two queries for the whole page."""
    named = [a.transaction_id for a in anomalies]
    for a in anomalies:
        named.extend(a.evidence.get(LISTED_EVIDENCE_IDS) or [])
    present = transactions_present(named)
    scheduled = scheduled_messages_present(
        [
            a.evidence["commit_log_offset"]
            for a in anomalies
            if a.kind == AnomalyKind.SCHEDULED_UNDELIVERED
            and isinstance(a.evidence.get("commit_log_offset"), int)
        ]
    )
    labels = dict(AnomalyKind.choices)
    rows = []
    for a in anomalies:
        listed = a.evidence.get(LISTED_EVIDENCE_IDS) or []
        offset = a.evidence.get("commit_log_offset")
        rows.append(
            {
                "anomaly": a,
                "label": labels.get(a.kind, ""),
                "linked": a.transaction_id in present,
                "scheduled_offset": offset
                if a.kind == AnomalyKind.SCHEDULED_UNDELIVERED and offset in scheduled
                else None,
                "evidence": [
                    (k, evidence_text(k, v))
                    for k, v in a.evidence.items()
                    if k != LISTED_EVIDENCE_IDS
                ],
                "listed": [(t, t in present) for t in listed],
            }
        )
    return rows


class ReconciliationRunView(ViewConsoleRequired, View):
    """GET ``/console/reconciliation/<id>/``: the run's facts, anomalies (``?kind=``,
    ``?page=``, 100 a page), charts of its analytics (per hour: final states, discard rate;
    resolution latency per producer group and topic) and its figures per producer group."""

    def get(self, request: HttpRequest, run_id: int) -> HttpResponse:
        try:
            run = reconciliation_run_get(run_id)
        except NotFound as error:
            raise Http404(error.message) from None
        form = AnomalyFilterForm(request.GET)
        status, page, rows = 200, None, []
        if form.is_valid():
            kind = form.cleaned_data["kind"] or None
            paginator = Paginator(reconciliation_anomalies(run, kind=kind), ANOMALIES_PER_PAGE)
            page = paginator.get_page(form.cleaned_data["page"] or 1)
            rows = anomaly_rows(list(page.object_list))
        else:
            status, kind = 400, None
        analytics = reconciliation_analytics(run)
        context = {
            "run": run,
            "form": form,
            "kind": kind,
            "page": page,
            "rows": rows,
            "analytics": analytics,
            "groups": list(producer_group_analytics(run).values()),
            "charts": reconciliation_charts(analytics).as_json(),
        }
        return render(request, "console/reconciliation/detail.html", context, status=status)


class ReconciliationRunNowView(OperateConsoleRequired, View):
    """POST ``/console/reconciliation/run/`` (operators): queue a run on the pipeline worker,
    recorded as started by ``console:<username>``; back to the list."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        actor = console_actor(request.user)
        reconciliation_run_queue(trigger=actor)
        messages.success(
            request,
            f"Reconciliation queued by {actor}. The pipeline worker runs it over what has "
            "settled since the last run; it appears here as it starts, or as a skipped run "
            "saying why when nothing has settled yet.",
        )
        return redirect("console:reconciliation")


urlpatterns: list[URLPattern] = [
    path("reconciliation/", ReconciliationListView.as_view(), name="reconciliation"),
    path("reconciliation/run/", ReconciliationRunNowView.as_view(), name="reconciliation_run_now"),
    path(
        "reconciliation/<int:run_id>/",
        ReconciliationRunView.as_view(),
        name="reconciliation_run",
    ),
]

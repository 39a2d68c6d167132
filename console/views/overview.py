"""Console pages: the overview (``/console/``) and its JSON (``/console/overview.json``), for
viewers and up. Both read ``broker.selectors.overview.overview``; the page renders the tiles
and tables on the server, ``static/console/overview.js`` draws the charts from the JSON and
fetches it again (at most once a second) when the live feed reports a change."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import URLPattern, path, reverse
from django.views import View

from broker.rules.audit import iso_utc
from broker.rules.durations import duration_text, relative_text
from broker.selectors.overview import Overview, overview
from broker.selectors.reconciliation import (
    reconciliation_run_latest_or_none,
    reconciliation_runs_page,
)
from console.permissions import ViewConsoleRequired


def _texts(
    row: dict[str, Any], now: int, *, spans: tuple[str, ...] = (), times: tuple[str, ...] = ()
) -> None:
    """Add ``<field>_text`` to ``row`` for each span (``duration_text``) and time (ISO-8601
    UTC, and how long ago: ``relative_text``) that is not None, so the page's script shows
    what the server's templates show without a second definition of the wording."""
    for name in spans:
        if row[name] is not None:
            row[f"{name}_text"] = duration_text(row[name])
    for name in times:
        if row[name] is not None:
            row[f"{name}_iso"] = iso_utc(row[name])
            row[f"{name}_text"] = relative_text(row[name], now)


def overview_json(data: Overview) -> dict[str, Any]:
    """``data`` as the JSON of ``/console/overview.json``: the fields of ``Overview`` (times in
    ms since the epoch, spans in ms), plus ``oldest_pending_age_ms``, on each
    ``oldest_pending`` row ``url`` (the transaction's console page), and the display texts of
    the spans and times the page shows (``<field>_text``, ``<field>_iso``)."""
    out = asdict(data)
    out["oldest_pending_age_ms"] = data.oldest_pending_age_ms
    _texts(out, data.now, spans=("oldest_pending_age_ms",), times=("now",))
    for row in out["oldest_pending"]:
        row["url"] = reverse("console:transaction", args=[row["transaction_id"]])
        _texts(row, data.now, spans=("age_ms",), times=("born_timestamp",))
    for row in out["latency"]:
        _texts(row, data.now, spans=("p50_ms", "p95_ms", "p99_ms"))
    for row in out["unreachable"]:
        _texts(row, data.now, times=("unreachable_since", "check_backoff_until"))
    return out


class OverviewView(ViewConsoleRequired, View):
    """``/console/``: tiles (pending now, discarded, unreachable groups, oldest pending), the
    charts (drawn in the browser), the unreachable and oldest-pending tables, and the latest
    successful reconciliation's anomalies by kind (with the newest run, if it did not
    succeed: running or failed)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        latest = reconciliation_run_latest_or_none()
        newest = next(iter(reconciliation_runs_page(per_page=1).runs), None)
        context = {
            "overview": overview(),
            "reconciliation": latest,
            "reconciliation_newest": newest if newest and newest != latest else None,
        }
        return render(request, "console/overview.html", context)


class OverviewDataView(ViewConsoleRequired, View):
    """``/console/overview.json``: ``overview_json`` of the overview now; never cached."""

    def get(self, request: HttpRequest) -> HttpResponse:
        response = JsonResponse(overview_json(overview()))
        response["Cache-Control"] = "no-store"
        return response


urlpatterns: list[URLPattern] = [
    path("", OverviewView.as_view(), name="overview"),
    path("overview.json", OverviewDataView.as_view(), name="overview_data"),
]

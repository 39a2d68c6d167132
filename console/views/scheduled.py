"""Console pages: delay and timer messages (``/console/scheduled/``): the list by due time,
filtered in the URL (``console.forms.scheduled``), one scheduled message's page with its
timeline (sent, due, delivered with the delivered copy, or recalled by whom and why), and the
operators' Recall (a reason required, audited by ``broker.services.timers.recall``): a full
operator, or one scoped to the message's producer group (else 403)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import HalfmoonError
from broker.rules.clock import now_ms
from broker.rules.grants import scope_description
from broker.rules.timers import recall_handle_of
from broker.selectors.scheduled_messages import (
    scheduled_message_get,
    scheduled_message_timeline,
    scheduled_messages,
)
from broker.services.operations.audit import VIA_CONSOLE
from broker.services.timers.recall import scheduled_message_recall
from console.forms.scheduled import ScheduledFilterForm, scheduled_filters_of
from console.permissions import (
    ViewConsoleRequired,
    may_operate_producer_group,
    operator_scope_of_user,
)
from console.views.actions import console_actor

PAGE_SIZE = 50
"""Scheduled messages per page of the list."""


class ScheduledListView(ViewConsoleRequired, View):
    """``/console/scheduled/``: scheduled messages by due time, earliest first, the waiting
    ones unless the filter says otherwise; invalid filters: the page with the form's errors,
    400."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = ScheduledFilterForm(request.GET)
        page, status = None, 400
        if form.is_valid():
            rows = scheduled_messages(**scheduled_filters_of(form))
            page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
            status = 200
        context = {
            "form": form,
            "page": page,
            "filter_query": urlencode(form.filter_params()),
            "now": now_ms(),
        }
        return render(request, "console/scheduled/list.html", context, status=status)


def _row_or_404(commit_log_offset: int):
    row = scheduled_message_get(commit_log_offset)
    if row is None:
        raise Http404(f"No scheduled message at commit log offset {commit_log_offset}.")
    return row


class ScheduledDetailView(ViewConsoleRequired, View):
    """``/console/scheduled/<commit log offset>/``: one scheduled message (by the commit log
    offset of the message as stored when sent), its timeline and, for who may, Recall."""

    def get(self, request: HttpRequest, commit_log_offset: int) -> HttpResponse:
        row = _row_or_404(commit_log_offset)
        now = now_ms()
        context = {
            "s": row,
            "timeline": scheduled_message_timeline(row, now=now),
            "recallable": row.state == "SCHEDULED" and row.delivery_timestamp > now,
            "may_recall": may_operate_producer_group(request.user, row.producer_group),
            "recall_handle": recall_handle_of(
                topic=row.topic, delivery_timestamp=row.delivery_timestamp, msg_id=row.msg_id
            ),
            "now": now,
        }
        return render(request, "console/scheduled/detail.html", context)


class ScheduledRecallView(ViewConsoleRequired, View):
    """POST ``/console/scheduled/<commit log offset>/recall/`` with ``reason``: the message is
    taken back (never delivered), as ``console:<user>``, audited; back to its page with what
    happened (or why it was refused: too late, no reason). A full operator, or one scoped to
    the message's producer group; anyone else 403."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, commit_log_offset: int) -> HttpResponse:
        row = _row_or_404(commit_log_offset)
        if not may_operate_producer_group(request.user, row.producer_group):
            scope = operator_scope_of_user(request.user)
            raise PermissionDenied(
                f"This message is of producer group {row.producer_group or '(none)'}; "
                f"you operate {scope_description(scope) if scope.operates_any else 'nothing'}."
            )
        try:
            recalled = scheduled_message_recall(
                topic=row.topic,
                msg_id=row.msg_id,
                recalled_by=console_actor(request.user),
                reason=request.POST.get("reason", ""),
                via=VIA_CONSOLE,
            )
        except HalfmoonError as exc:
            messages.error(request, f"Not recalled: {exc.message}")
        else:
            messages.success(
                request,
                f"Recalled {recalled.msg_id}: it will never be delivered to {recalled.topic}.",
            )
        return redirect("console:scheduled_message", commit_log_offset=commit_log_offset)


urlpatterns: list[URLPattern] = [
    path("scheduled/", ScheduledListView.as_view(), name="scheduled"),
    path(
        "scheduled/<int:commit_log_offset>/",
        ScheduledDetailView.as_view(),
        name="scheduled_message",
    ),
    path(
        "scheduled/<int:commit_log_offset>/recall/",
        ScheduledRecallView.as_view(),
        name="scheduled_recall",
    ),
]

"""Console pages: one consumer group and its operations (``/console/consumer-groups/<group>/``):
its offsets per queue with their lag, a reset of the offsets to a time and "skip the backlog"
(each previewed as a frozen plan, then applied with a reason), a resend of one message to the
group, and its dead-letter queue (resend one, or preview a frozen set and apply it with live
progress).

Every write goes through ``broker.services.consumption`` (``offset_resets``, ``redelivery``,
``dead_letters``), which audits it; these views read the form, call the service and say
what happened. Viewers see the pages without the controls; an operator scoped to consumer
groups acts on their groups only (``ConsumerGroupOperateRequired``: 403 on another's).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import HalfmoonError, NotFound
from broker.selectors.blocked_message_groups import blocked_message_groups
from broker.selectors.consumer_groups import (
    DEAD_LETTER_SET_ACTIONS,
    OFFSET_RESET_ACTIONS,
    consumer_group_of_entry,
    consumer_group_offsets,
    consumer_group_op_get,
    consumer_group_operations,
    dead_letter_set_page,
    dead_letters,
)
from broker.selectors.messages import message_at
from broker.selectors.subscriptions import subscription_list
from broker.selectors.topology import consumer_group_get
from broker.services.consumption.dead_letters import (
    dead_letter_resend,
    dead_letters_apply,
    dead_letters_preview,
)
from broker.services.consumption.offset_resets import (
    backlog_skip_preview,
    offset_reset_apply,
    offset_reset_preview,
)
from broker.services.consumption.redelivery import message_resend
from broker.services.operations.audit import VIA_CONSOLE
from console.forms.consumer_groups import OffsetResetForm
from console.permissions import (
    ConsumerGroupOperateRequired,
    ViewConsoleRequired,
    may_operate_consumer_group,
    operator_scope_of_user,
)
from console.views.actions import console_actor

CONSOLE = VIA_CONSOLE


def _group_or_404(group: str) -> None:
    try:
        consumer_group_get(group)
    except NotFound as exc:
        raise Http404(exc.message) from None


def _entry_or_404(group: str, entry_id: int, actions: tuple[str, ...]):
    """The ``AuditEntry`` of operation ``entry_id`` of ``group``, else 404."""
    try:
        entry = consumer_group_op_get(entry_id, actions)
    except NotFound as exc:
        raise Http404(exc.message) from None
    if consumer_group_of_entry(entry) != group:
        raise Http404(f"Operation {entry_id} is not of consumer group {group}.")
    return entry


def _allowed(request: HttpRequest) -> frozenset[str] | None:
    """The consumer groups the user may operate: None for a full operator."""
    return operator_scope_of_user(request.user).consumer_groups


class ConsumerGroupView(ViewConsoleRequired, View):
    """GET ``/console/consumer-groups/<group>/``: its FIFO flag (a FIFO group's oldest blocked
    message groups, linked to their page), its subscriptions, offsets per queue with lag, the reset and
    skip forms (operators of the group), the dead letters (newest 100; ``?before=`` pages)
    and the group's latest operations."""

    def get(self, request: HttpRequest, group: str) -> HttpResponse:
        _group_or_404(group)
        before = request.GET.get("before", "")
        letters = dead_letters(
            consumer_group=group, before=int(before) if before.isdigit() else None
        )
        offsets = consumer_group_offsets(consumer_group=group)
        row = consumer_group_get(group)
        context = {
            "group": row,
            "blocked": blocked_message_groups(
                consumer_group=group, max_delivery_attempts=row.max_delivery_attempts, limit=3
            )
            if row.fifo
            else None,
            "offsets": offsets,
            "subscriptions": subscription_list(consumer_group=group),
            "total_lag": sum(o.lag for o in offsets),
            "topics": sorted({o.topic for o in offsets}),
            "dead_letters": letters,
            "next_before": letters[-1].message.pk if len(letters) >= 100 else None,
            "may_operate": may_operate_consumer_group(request.user, group),
            "operations": consumer_group_operations(group),
            "form": OffsetResetForm(),
        }
        return render(request, "console/consumer_groups/detail.html", context)


class _GroupOperation(ConsumerGroupOperateRequired, View):
    group_url_kwarg = "group"
    http_method_names = ["post"]


class OffsetResetPreviewView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/offset-resets/`` with ``at`` (UTC) and
    ``topic`` (optional): the frozen plan, shown at ``.../offset-resets/<id>/``."""

    def post(self, request: HttpRequest, group: str) -> HttpResponse:
        form = OffsetResetForm(request.POST)
        if not form.is_valid():
            messages.error(request, f"The reset is not valid: {form.errors.as_text()}")
            return redirect("console:consumer_group", group=group)
        try:
            entry = offset_reset_preview(
                consumer_group=group,
                timestamp=form.cleaned_data["at"],
                topic=form.cleaned_data["topic"] or None,
                actor=console_actor(request.user),
                via=CONSOLE,
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, exc.message)
            return redirect("console:consumer_group", group=group)
        return redirect("console:offset_reset", group=group, reset_id=entry.pk)


class BacklogSkipPreviewView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/skip-backlog/``: the frozen plan of moving the
    offsets to the queue ends, shown at ``.../offset-resets/<id>/``."""

    def post(self, request: HttpRequest, group: str) -> HttpResponse:
        try:
            entry = backlog_skip_preview(
                consumer_group=group,
                topic=request.POST.get("topic") or None,
                actor=console_actor(request.user),
                via=CONSOLE,
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, exc.message)
            return redirect("console:consumer_group", group=group)
        return redirect("console:offset_reset", group=group, reset_id=entry.pk)


class OffsetResetView(ViewConsoleRequired, View):
    """GET ``/console/consumer-groups/<group>/offset-resets/<id>/``: the plan per queue
    (current, new, delivered again, skipped), the count N, and the apply form."""

    def get(self, request: HttpRequest, group: str, reset_id: int) -> HttpResponse:
        entry = _entry_or_404(group, reset_id, OFFSET_RESET_ACTIONS)
        context = {
            "group": group,
            "entry": entry,
            "may_operate": may_operate_consumer_group(request.user, group),
        }
        return render(request, "console/consumer_groups/offset_reset.html", context)


class OffsetResetApplyView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/offset-resets/<id>/apply/`` with ``reason``."""

    def post(self, request: HttpRequest, group: str, reset_id: int) -> HttpResponse:
        _entry_or_404(group, reset_id, OFFSET_RESET_ACTIONS)
        try:
            entry = offset_reset_apply(
                reset_id=reset_id,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, f"Not applied: {exc.message}")
        else:
            messages.success(request, f"Applied: {entry.result}.")
        return redirect("console:offset_reset", group=group, reset_id=reset_id)


class MessageResendView(ConsumerGroupOperateRequired, View):
    """``/console/consumer-groups/<group>/resend/<commit_log_offset>/``: GET asks for the
    reason (showing the message); POST resends it to the group only."""

    group_url_kwarg = "group"

    def get(self, request: HttpRequest, group: str, commit_log_offset: int) -> HttpResponse:
        _group_or_404(group)
        message = message_at(commit_log_offset)
        if message is None:
            raise Http404(f"No message at commit log offset {commit_log_offset}.")
        return render(
            request,
            "console/consumer_groups/resend.html",
            {"group": group, "message": message},
        )

    def post(self, request: HttpRequest, group: str, commit_log_offset: int) -> HttpResponse:
        try:
            entry = message_resend(
                consumer_group=group,
                commit_log_offset=commit_log_offset,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                via=CONSOLE,
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            if isinstance(exc, NotFound):
                raise Http404(exc.message) from None
            messages.error(request, f"Not resent: {exc.message}")
            return redirect(
                "console:message_resend", group=group, commit_log_offset=commit_log_offset
            )
        messages.success(request, f"Resent: {entry.result}.")
        return redirect("console:consumer_group", group=group)


class DeadLetterResendView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/dead-letters/<commit_log_offset>/resend/``
    with ``reason``: the dead letter's original message delivered again to the group."""

    def post(self, request: HttpRequest, group: str, commit_log_offset: int) -> HttpResponse:
        try:
            entry = dead_letter_resend(
                consumer_group=group,
                commit_log_offset=commit_log_offset,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                via=CONSOLE,
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, f"Not resent: {exc.message}")
        else:
            messages.success(request, f"Resent: {entry.result}.")
        return redirect("console:consumer_group", group=group)


class DeadLettersPreviewView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/dead-letter-resends/`` with ``scope``
    (``all``: every dead letter stored now; ``selection``: repeated ``commit_log_offset``):
    the frozen set, shown at ``.../dead-letter-resends/<id>/``."""

    def post(self, request: HttpRequest, group: str) -> HttpResponse:
        selection = None
        if request.POST.get("scope") != "all":
            raw = request.POST.getlist("commit_log_offset")
            selection = [int(o) for o in raw if o.isdigit()]
            if not selection:
                messages.error(request, "Select at least one dead letter.")
                return redirect("console:consumer_group", group=group)
        try:
            entry = dead_letters_preview(
                consumer_group=group,
                commit_log_offsets=selection,
                actor=console_actor(request.user),
                via=CONSOLE,
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, exc.message)
            return redirect("console:consumer_group", group=group)
        return redirect("console:dead_letter_resend", group=group, resend_id=entry.pk)


def _int(text: str | None, default: int) -> int:
    return int(text) if text and text.isdigit() else default


class DeadLetterSetView(ViewConsoleRequired, View):
    """GET ``/console/consumer-groups/<group>/dead-letter-resends/<id>/``: the frozen set
    (paged), the apply form, then live progress and the per-dead-letter report."""

    def get(self, request: HttpRequest, group: str, resend_id: int) -> HttpResponse:
        entry = _entry_or_404(group, resend_id, DEAD_LETTER_SET_ACTIONS)
        context = {
            "group": group,
            "entry": entry,
            "page": dead_letter_set_page(entry, page=_int(request.GET.get("page"), 1)),
            "may_operate": may_operate_consumer_group(request.user, group),
        }
        return render(request, "console/consumer_groups/dead_letter_set.html", context)


class DeadLetterSetApplyView(_GroupOperation):
    """POST ``/console/consumer-groups/<group>/dead-letter-resends/<id>/apply/`` with
    ``reason``: queued; the Celery task resends the frozen set (again: a resume)."""

    def post(self, request: HttpRequest, group: str, resend_id: int) -> HttpResponse:
        _entry_or_404(group, resend_id, DEAD_LETTER_SET_ACTIONS)
        try:
            entry = dead_letters_apply(
                resend_id=resend_id,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                allowed_consumer_groups=_allowed(request),
            )
        except HalfmoonError as exc:
            messages.error(request, f"Not applied: {exc.message}")
        else:
            messages.success(request, f"Queued: {entry.total} dead letters to resend.")
        return redirect("console:dead_letter_resend", group=group, resend_id=resend_id)


urlpatterns: list[URLPattern] = [
    path("consumer-groups/<str:group>/", ConsumerGroupView.as_view(), name="consumer_group"),
    path(
        "consumer-groups/<str:group>/offset-resets/",
        OffsetResetPreviewView.as_view(),
        name="offset_reset_preview",
    ),
    path(
        "consumer-groups/<str:group>/skip-backlog/",
        BacklogSkipPreviewView.as_view(),
        name="backlog_skip_preview",
    ),
    path(
        "consumer-groups/<str:group>/offset-resets/<int:reset_id>/",
        OffsetResetView.as_view(),
        name="offset_reset",
    ),
    path(
        "consumer-groups/<str:group>/offset-resets/<int:reset_id>/apply/",
        OffsetResetApplyView.as_view(),
        name="offset_reset_apply",
    ),
    path(
        "consumer-groups/<str:group>/resend/<int:commit_log_offset>/",
        MessageResendView.as_view(),
        name="message_resend",
    ),
    path(
        "consumer-groups/<str:group>/dead-letters/<int:commit_log_offset>/resend/",
        DeadLetterResendView.as_view(),
        name="dead_letter_resend_one",
    ),
    path(
        "consumer-groups/<str:group>/dead-letter-resends/",
        DeadLettersPreviewView.as_view(),
        name="dead_letters_preview",
    ),
    path(
        "consumer-groups/<str:group>/dead-letter-resends/<int:resend_id>/",
        DeadLetterSetView.as_view(),
        name="dead_letter_resend",
    ),
    path(
        "consumer-groups/<str:group>/dead-letter-resends/<int:resend_id>/apply/",
        DeadLetterSetApplyView.as_view(),
        name="dead_letter_resend_apply",
    ),
]

"""Console pages: a FIFO consumer group's blocked message groups
(``/console/consumer-groups/<group>/blocked-message-groups/``): each message group whose head
has failed and holds back the rest, with the head message, its attempts, since when it blocks
and what waits behind it, and the operators' "Send head to DLQ" with a reason
(``broker.services.consumption.blocked_message_groups``, audited ``dead-letter-head``).

Viewers see the page without the controls; an operator scoped to consumer groups acts on their
groups only (``ConsumerGroupOperateRequired``: 403 on another's).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import HalfmoonError, NotFound
from broker.rules.clock import now_ms
from broker.selectors.blocked_message_groups import WAITING_CAP, blocked_message_groups
from broker.selectors.topology import consumer_group_get
from broker.services.consumption.blocked_message_groups import blocked_message_group_dead_letter
from broker.services.operations.audit import VIA_CONSOLE
from console.forms.consumer_groups import HeadDeadLetterForm
from console.permissions import (
    ConsumerGroupOperateRequired,
    ViewConsoleRequired,
    may_operate_consumer_group,
    operator_scope_of_user,
)
from console.views.actions import console_actor


class BlockedMessageGroupsView(ViewConsoleRequired, View):
    """GET ``/console/consumer-groups/<group>/blocked-message-groups/``: the oldest blocked
    100 (``broker.selectors.blocked_message_groups``) and how many in all; a group that is not
    FIFO says so and lists nothing."""

    def get(self, request: HttpRequest, group: str) -> HttpResponse:
        try:
            row = consumer_group_get(group)
        except NotFound as exc:
            raise Http404(exc.message) from None
        page = None
        if row.fifo:
            page = blocked_message_groups(
                consumer_group=group, max_delivery_attempts=row.max_delivery_attempts
            )
        context = {
            "group": row,
            "page": page,
            "now": now_ms(),
            "waiting_cap": WAITING_CAP,
            "may_operate": may_operate_consumer_group(request.user, group),
        }
        return render(request, "console/consumer_groups/blocked_message_groups.html", context)


class HeadDeadLetterView(ConsumerGroupOperateRequired, View):
    """POST ``/console/consumer-groups/<group>/blocked-message-groups/dead-letter-head/`` with
    ``topic``, ``message_group``, ``msg_id`` (the head shown) and ``reason``: the head to
    ``%DLQ%{group}``; a refusal (not blocked any more, another head now) is said on the page."""

    group_url_kwarg = "group"
    http_method_names = ["post"]

    def post(self, request: HttpRequest, group: str) -> HttpResponse:
        form = HeadDeadLetterForm(request.POST)
        if not form.is_valid():
            messages.error(request, f"Not sent to the DLQ: {form.errors.as_text()}")
            return redirect("console:blocked_message_groups", group=group)
        data = form.cleaned_data
        try:
            entry = blocked_message_group_dead_letter(
                consumer_group=group,
                topic=data["topic"],
                message_group=data["message_group"],
                msg_id=data["msg_id"],
                reason=data["reason"],
                actor=console_actor(request.user),
                via=VIA_CONSOLE,
                allowed_consumer_groups=operator_scope_of_user(request.user).consumer_groups,
            )
        except HalfmoonError as exc:
            if isinstance(exc, NotFound):
                raise Http404(exc.message) from None
            messages.error(request, f"Not sent to the DLQ: {exc.message}")
        else:
            messages.success(request, f"Sent to the DLQ: {entry.result}.")
        return redirect("console:blocked_message_groups", group=group)


urlpatterns: list[URLPattern] = [
    path(
        "consumer-groups/<str:group>/blocked-message-groups/",
        BlockedMessageGroupsView.as_view(),
        name="blocked_message_groups",
    ),
    path(
        "consumer-groups/<str:group>/blocked-message-groups/dead-letter-head/",
        HeadDeadLetterView.as_view(),
        name="blocked_message_group_dead_letter_head",
    ),
]

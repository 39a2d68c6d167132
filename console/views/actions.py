"""Console pages: an operator's actions on one transaction (commit, rollback, resume checks,
check now) and bulk actions (preview over a frozen set, confirm, live progress, report).

Every write goes through ``broker.services.transactions.operator`` / ``broker.services.operations.bulk``, which audit
it; these views only read the form, call the service and say what happened. An operator scoped
to producer groups (``console.permissions``) acts only on their transactions: one
transaction's action is 403 on another group's, and its bulk previews leave the other groups'
transactions out (``broker.services.operations.bulk``, ``allowed_producer_groups``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.views import View

from broker.conf import conf
from broker.errors import Forbidden, HalfmoonError
from broker.rules.grants import scope_description
from broker.selectors.audit import bulk_get, bulk_targets_page
from broker.selectors.grants import bulk_target_producer_groups
from broker.services.operations.audit import VIA_CONSOLE
from broker.services.operations.bulk import (
    BULK_ACTIONS,
    bulk_apply,
    bulk_preview_filter,
    bulk_preview_selection,
)
from broker.services.transactions.operator import OPERATOR_ACTIONS
from console.forms.transactions import TransactionFilterForm, filters_from_form
from console.permissions import (
    OperateAnyGroupRequired,
    TransactionOperateRequired,
    ViewConsoleRequired,
    operator_scope_of_user,
)


def console_actor(user: AbstractBaseUser | AnonymousUser) -> str:
    """How a console user is named in the journals and the audit log: ``console:<username>``."""
    return f"console:{user.get_username()}"


def _done_message(action: str, tx: Any) -> str:
    """What the console says once ``action`` was done to ``tx`` (a ``Transaction``)."""
    if action == "commit":
        return (
            f"Committed {tx.pk}: delivered to {tx.topic} queue {tx.queue_id} "
            f"(queue offset {tx.queue_offset})."
        )
    if action == "rollback":
        return f"Rolled back {tx.pk}: it will never be delivered."
    if action == "resume-check":
        return f"Checks resumed for {tx.pk}: PREPARED with 0 checks, checked at the next scan."
    return f"Check requested for {tx.pk}: the next scan checks it."


class TransactionActionView(TransactionOperateRequired, View):
    """POST ``/console/transactions/<id>/actions/<action>/`` with ``reason``: the action, then
    back to the transaction page with what happened (or why it was refused). A full operator,
    or one scoped to the transaction's producer group (else 403)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, transaction_id: str, action: str) -> HttpResponse:
        service = OPERATOR_ACTIONS.get(action)
        if service is None:
            raise Http404(f"No action {action}")
        try:
            tx = service(
                transaction_id=transaction_id,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                via=VIA_CONSOLE,
            )
        except HalfmoonError as exc:
            messages.error(request, f"{action} refused: {exc.message}")
        else:
            messages.success(request, _done_message(action, tx))
        return redirect("console:transaction", transaction_id=transaction_id)


class BulkPreviewView(OperateAnyGroupRequired, View):
    """POST ``/console/bulk/``: ``action``, ``reason`` and ``scope`` (``selection`` with
    repeated ``transaction_id``, or ``filter`` with the stuck list's filter parameters) ->
    a previewed bulk (the frozen set), shown at ``/console/bulk/<id>/``. For an operator scoped
    to producer groups the preview leaves out the other groups' transactions and says so."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        data = request.POST
        common = {
            "action": data.get("action", ""),
            "reason": data.get("reason", ""),
            "actor": console_actor(request.user),
            "via": VIA_CONSOLE,
            "allowed_producer_groups": operator_scope_of_user(request.user).producer_groups,
        }
        form = TransactionFilterForm(data)
        query = urlencode(form.filter_params())
        back = redirect(reverse("console:transactions") + (f"?{query}" if query else ""))
        try:
            if data.get("scope") == "filter":
                if not form.is_valid():
                    messages.error(request, f"The filter is not valid: {form.errors.as_text()}")
                    return back
                bulk = bulk_preview_filter(filters=filters_from_form(form), **common)
            else:
                ids = data.getlist("transaction_id")
                if not ids:
                    messages.error(request, "Select at least one transaction.")
                    return back
                bulk = bulk_preview_selection(transaction_ids=ids, **common)
        except HalfmoonError as exc:
            messages.error(request, exc.message)
            return back
        return redirect("console:bulk", bulk_id=bulk.pk)


class BulkView(ViewConsoleRequired, View):
    """GET ``/console/bulk/<id>/``: the bulk's server-side count, its frozen targets (paged:
    ``?page=``), what confirming does, live progress and the per-transaction report."""

    def get(self, request: HttpRequest, bulk_id: int) -> HttpResponse:
        try:
            bulk = bulk_get(bulk_id)
        except HalfmoonError:
            raise Http404(f"No bulk action {bulk_id}") from None
        page = bulk_targets_page(bulk, page=_int(request.GET.get("page"), 1))
        action = bulk.action.removeprefix("bulk-")
        scope = operator_scope_of_user(request.user)
        outside: list[str] = []
        if scope.operates_any and scope.producer_groups is not None:
            outside = sorted(bulk_target_producer_groups(bulk.pk) - scope.producer_groups)
        context = {
            "bulk": bulk,
            "action": action,
            "states": BULK_ACTIONS[action][1],
            "page": page,
            "check_max": conf.transaction_check_max,
            "may_apply": scope.operates_any and not outside,
            "outside_groups": outside,
        }
        return render(request, "console/bulk/detail.html", context)


def _int(text: str | None, default: int) -> int:
    return int(text) if text and text.isdigit() else default


class BulkApplyView(OperateAnyGroupRequired, View):
    """POST ``/console/bulk/<id>/apply/``: confirm (or resume) the bulk; the Celery task
    applies it to the frozen set. A scoped operator may confirm only a bulk whose every
    transaction is of its producer groups (else 403)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, bulk_id: int) -> HttpResponse:
        scope = operator_scope_of_user(request.user)
        try:
            bulk = bulk_apply(
                bulk_id=bulk_id,
                actor=console_actor(request.user),
                allowed_producer_groups=scope.producer_groups,
            )
        except Forbidden as exc:
            raise PermissionDenied(
                f"{exc.message} You operate {scope_description(scope)}."
            ) from None
        except HalfmoonError as exc:
            if exc.code == "bulk_not_found":
                raise Http404(exc.message) from None
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Bulk #{bulk.pk} queued: {bulk.total} transactions.")
        return redirect("console:bulk", bulk_id=bulk_id)


urlpatterns: list[URLPattern] = [
    path(
        "transactions/<str:transaction_id>/actions/<str:action>/",
        TransactionActionView.as_view(),
        name="transaction_action",
    ),
    path("bulk/", BulkPreviewView.as_view(), name="bulk_preview"),
    path("bulk/<int:bulk_id>/", BulkView.as_view(), name="bulk"),
    path("bulk/<int:bulk_id>/apply/", BulkApplyView.as_view(), name="bulk_apply"),
]

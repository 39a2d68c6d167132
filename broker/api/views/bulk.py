"""api-v1 additions: the console's bulk actions (``docs/api.md`` "Bulk actions"): preview a
bulk commit, rollback or resume-check over a selection or the stuck list's filter (the frozen
set), read it and its targets, confirm it. Every step goes through ``broker.services.operations.bulk``,
which audits it (actor ``operator:<key name>``, via ``api``). An admin key operates every
producer group; a key with operator grants only its own, as in the console: its previews leave
the other groups' transactions out and say so, and it confirms only a bulk within its groups."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsOperatorKey, operator_actor
from broker.api.serializers.bulk import (
    BulkActionOutSerializer,
    BulkPreviewInputSerializer,
    BulkPreviewInSerializer,
    BulkTargetOutSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.api.views.transactions import TransactionPagination
from broker.models import AuditEntry
from broker.selectors.audit import bulk_get
from broker.services.operations.bulk import bulk_apply, bulk_preview_filter, bulk_preview_selection

_SCOPED = (
    " An admin key operates every producer group; a key with operator grants "
    "(`create_access_key --operator-producer-group G`) only its own (any other key: 403)."
)


class BulkActionCreateView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=BulkPreviewInSerializer,
        responses={201: BulkActionOutSerializer, **error_responses(413)},
        summary="Preview a bulk commit, rollback or resume-check (admin or operator key; "
        "addition to api-v1)",
        description=(
            "The dry run of the console's bulk action: the transactions of the selection "
            "(`transaction_ids`) or of the stuck list's `filter` whose state allows the action "
            "now are frozen as the bulk's targets (at most 10,000), `previewed`; nothing changes "
            "until `POST /api/v1/bulk-actions/{bulk_id}/apply`. A key scoped to producer groups "
            "gets the other groups' transactions left out, counted in `scope.excluded`. 400 "
            "`reason_required`, `bulk_empty` (nothing would change), `bulk_too_large`; 403 "
            "`bulk_outside_scope` (everything it would change is another group's)." + _SCOPED
        ),
    )
    def post(self, request: Request) -> Response:
        data = validated(BulkPreviewInputSerializer, request.data)
        common: dict[str, Any] = {
            "action": data["action"],
            "reason": data["reason"],
            "actor": operator_actor(request),
            "via": AuditEntry.Via.API,
            "allowed_producer_groups": request.user.operator_scope.producer_groups,
        }
        if "filter" in data:
            entry = bulk_preview_filter(filters=dict(data["filter"]), **common)
        else:
            entry = bulk_preview_selection(transaction_ids=data["transaction_ids"], **common)
        return Response(BulkActionOutSerializer(entry).data, status=status.HTTP_201_CREATED)


class BulkActionDetailView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        responses={200: BulkActionOutSerializer, **error_responses(404)},
        summary="A bulk action and its progress (admin or operator key; addition to api-v1)",
        description="404 `bulk_not_found`. `processed` of `total` targets are no longer "
        "pending; `counts` gives them by result; `state` is `done` when all are.",
    )
    def get(self, request: Request, bulk_id: int) -> Response:
        return Response(BulkActionOutSerializer(bulk_get(bulk_id)).data)


class BulkActionTargetsView(APIView):
    permission_classes = [IsOperatorKey]
    pagination_class = TransactionPagination

    @extend_schema(
        responses={200: BulkTargetOutSerializer(many=True), **error_responses(404)},
        summary="A bulk action's frozen targets, paginated (admin or operator key; addition to "
        "api-v1)",
        description="In their frozen order, each with its result (`pending`, `done`, "
        "`already_ended` with what ended it, `failed` with the error). Pages as "
        "`GET /api/v1/transactions`. 404 `bulk_not_found`.",
    )
    def get(self, request: Request, bulk_id: int) -> Response:
        entry = bulk_get(bulk_id)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(entry.targets.order_by("id"), request, view=self)
        return paginator.get_paginated_response(BulkTargetOutSerializer(page, many=True).data)


class BulkActionApplyView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=None,
        responses={202: BulkActionOutSerializer, **error_responses(404, 409)},
        summary="Confirm a previewed bulk action (admin or operator key; addition to api-v1)",
        description=(
            "`queued`: a worker applies the action to the frozen targets only, one transaction "
            "at a time (a transaction that arrived after the preview is never touched); poll "
            "`GET /api/v1/bulk-actions/{bulk_id}` for progress. Confirming a queued or running "
            "bulk again resumes it (done targets are skipped). 404 `bulk_not_found`; 409 "
            "`bulk_done`; 403 `bulk_outside_scope` for a scoped key when a target is of a "
            "producer group it may not operate." + _SCOPED
        ),
    )
    def post(self, request: Request, bulk_id: int) -> Response:
        entry = bulk_apply(
            bulk_id=bulk_id,
            actor=operator_actor(request),
            allowed_producer_groups=request.user.operator_scope.producer_groups,
        )
        return Response(BulkActionOutSerializer(entry).data, status=status.HTTP_202_ACCEPTED)

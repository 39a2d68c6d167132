"""api-v1 transactions: prepare (send a half message), list, one, its timeline, end, and the
operators' resolve and resume-check (an admin key, or a key operating the transaction's
producer group: ``broker.api.permissions.IsOperatorKey``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import (
    IsOperatorKey,
    operator_actor,
    require_producer,
    require_producer_group_operator,
    require_transaction_reader,
)
from broker.api.serializers.transactions import (
    TRANSACTION_PAGE_DEFAULT,
    TRANSACTION_PAGE_MAX,
    OperatorReasonInputSerializer,
    OperatorReasonInSerializer,
    PageQuerySerializer,
    TransactionEndInSerializer,
    TransactionEndOutSerializer,
    TransactionListQuerySerializer,
    TransactionOutSerializer,
    TransactionPrepareInSerializer,
    TransactionPrepareOutSerializer,
    TransactionResolveInputSerializer,
    TransactionResolveInSerializer,
    TransactionResumeCheckInSerializer,
    TransactionTimelineOutSerializer,
)
from broker.api.shapes import represented, validated
from broker.api.views.base import error_responses
from broker.errors import Forbidden
from broker.selectors.timeline import transaction_timeline
from broker.selectors.transactions import transaction_get, transaction_list
from broker.services.transactions import operator
from broker.services.transactions.end import transaction_end
from broker.services.transactions.half import transaction_prepare


class TransactionPagination(PageNumberPagination):
    """Pages of transactions: ``page`` and ``page_size`` validated first
    (``PageQuerySerializer``: a malformed or out-of-range value is 400, where DRF would
    silently use the default size); a page past the last is DRF's 404."""

    page_size = TRANSACTION_PAGE_DEFAULT
    page_size_query_param = "page_size"
    max_page_size = TRANSACTION_PAGE_MAX

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        """DRF's page of ``queryset``, after the query's page parameters passed
        ``PageQuerySerializer``. Raises ValidationError (400), NotFound (404 past the end)."""
        validated(PageQuerySerializer, request.query_params)
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """DRF's ``page`` and ``page_size`` parameters with their bounds."""
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            "page": {"minimum": 1},
            "page_size": {"minimum": 1, "maximum": self.max_page_size},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters


class TransactionListCreateView(APIView):
    pagination_class = TransactionPagination

    @extend_schema(
        request=TransactionPrepareInSerializer,
        responses={
            201: TransactionPrepareOutSerializer,
            200: OpenApiResponse(
                TransactionPrepareOutSerializer, description="msg_id already stored"
            ),
            **error_responses(404, 409, 413),
        },
        summary="Send a half message",
        description="400 `message_type_mismatch` when the topic's `message_type` is neither "
        "TRANSACTION nor MIXED (the topic's state: no schema states it).",
    )
    def post(self, request: Request) -> Response:
        data = validated(TransactionPrepareInSerializer, request.data)
        require_producer(request, data["producer_group"])
        tx, created = transaction_prepare(**data)
        return Response(
            represented(TransactionPrepareOutSerializer, tx),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        parameters=[TransactionListQuerySerializer],
        responses={200: TransactionOutSerializer(many=True), **error_responses(404)},
        summary="List transactions (paginated)",
        description="Pages of `page_size` (default 100, at most 1000) transactions, oldest "
        "first: `count`, the `next` and `previous` pages' URLs (null at either end) and "
        "`results`. A `page` past the last (or not a number) is 404 `not_found`.",
    )
    def get(self, request: Request) -> Response:
        require_transaction_reader(request)
        query = validated(TransactionListQuerySerializer, request.query_params)
        qs = transaction_list(
            state=query.get("state"),
            producer_group=query.get("producer_group"),
            topic=query.get("topic"),
            producer_groups=request.user.producer_scope(),
            operator_access_key_id=request.user.key_id,
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(TransactionOutSerializer(page, many=True).data)


def _transaction_readable(request: Request, transaction_id: str) -> Any:
    """The transaction, if this access key may read it (an admin key, a key of its producer
    group, or a key operating that group). Raises NotFound (404), Forbidden (403)."""
    tx = transaction_get(transaction_id)
    if not request.user.may_read_transactions(tx.producer_group):
        raise Forbidden("This access key may not read this producer group's transactions.")
    return tx


class TransactionDetailView(APIView):
    @extend_schema(
        responses={200: TransactionOutSerializer, **error_responses(404)}, summary="One transaction"
    )
    def get(self, request: Request, transaction_id: str) -> Response:
        tx = _transaction_readable(request, transaction_id)
        return Response(TransactionOutSerializer(tx).data)


class TransactionTimelineView(APIView):
    @extend_schema(
        responses={200: TransactionTimelineOutSerializer, **error_responses(404)},
        summary="A transaction's timeline from the broker's journals (addition to api-v1)",
        description="Half message stored, each back-check with its answer and latency, "
        "undelivered checks, discard, resume, the end and who sent it (producer, check answer, "
        "operator with reason), the delivered message and each consumer group's delivery. "
        "Oldest first; entries whose time is not journalled (acks) have timestamp null and "
        "come last. Readable by the keys that may read the transaction.",
    )
    def get(self, request: Request, transaction_id: str) -> Response:
        tx = _transaction_readable(request, transaction_id)
        timeline = transaction_timeline(tx.transaction_id)
        out = {"transaction_id": tx.transaction_id, "state": tx.state, "timeline": timeline}
        return Response(TransactionTimelineOutSerializer(out).data)


class TransactionEndView(APIView):
    @extend_schema(
        request=TransactionEndInSerializer,
        responses={200: TransactionEndOutSerializer, **error_responses(404, 409, 413)},
        summary="End a transaction: commit, rollback or unknown",
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        data = validated(TransactionEndInSerializer, request.data)
        require_producer(request, data["producer_group"])
        tx = transaction_end(
            transaction_id=transaction_id,
            producer_group=data["producer_group"],
            action=data["action"],
            from_transaction_check=data["from_transaction_check"],
            remark=data["remark"],
        )
        return Response(represented(TransactionEndOutSerializer, tx))


def _operable(request: Request, transaction_id: str) -> None:
    """For a key scoped by operator grants: the transaction must exist (404
    ``transaction_not_found``) and be of a producer group it operates (403
    ``permission_denied``, ``details.producer_group``). An admin key is not checked here (the
    service reports an unknown transaction, as before)."""
    if request.user.is_admin:
        return
    tx = transaction_get(transaction_id)
    require_producer_group_operator(request, tx.producer_group)


_SCOPED = (
    " An admin key may act on every transaction; a key with operator grants "
    "(`create_access_key --operator-producer-group G`) only on those of its producer groups "
    "(403 `permission_denied` with `details.producer_group` otherwise); any other key gets 403."
)


class TransactionResolveView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=TransactionResolveInSerializer,
        responses={200: TransactionOutSerializer, **error_responses(404, 409, 413)},
        summary="Commit or roll back a PREPARED or DISCARDED transaction by hand (admin or "
        "operator key)",
        description=(
            "An operator resolves the transaction exactly once: commit delivers it to its "
            "topic and queue with its msg_id, rollback drops it; `resolved_by` becomes "
            "`operator`. The reason is required (400 `reason_required` when missing, null or "
            "blank) and kept in the audit trail with the access key's name. 409 "
            "`transaction_already_resolved` (with `details.state`, and what ended it: "
            "`resolved_by`, `resolved_timestamp`, `actor`, `reason`, `ended_by`) if it is "
            "COMMITTED or ROLLED_BACK, a repeat of this call included: nothing is delivered "
            "twice. Every call is in the audit log." + _SCOPED
        ),
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        _operable(request, transaction_id)
        data = validated(TransactionResolveInputSerializer, request.data)
        tx = operator.transaction_operator_resolve(
            transaction_id=transaction_id,
            action=data["action"],
            reason=data["reason"] or "",
            actor=operator_actor(request),
        )
        return Response(TransactionOutSerializer(tx).data)


class TransactionResumeCheckView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=TransactionResumeCheckInSerializer,
        responses={200: TransactionOutSerializer, **error_responses(404, 409, 413)},
        summary="Resume the back-checks of a DISCARDED transaction (admin or operator key)",
        description=(
            "RocketMQ's resumeCheckHalfMessage: the half message is re-appended to its half "
            "queue and the transaction is PREPARED again with `check_times` 0, checked at the "
            "next scan. Its `born_timestamp` is kept, so one older than "
            "HALFMOON_FILE_RESERVED_HOURS is discarded again at once. 409 "
            "`transaction_not_discarded` (with `details.state`, and for an ended transaction "
            "what ended it) otherwise. An optional `reason` is kept in the audit log." + _SCOPED
        ),
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        _operable(request, transaction_id)
        data = validated(TransactionResumeCheckInSerializer, request.data or {})
        tx = operator.transaction_resume_check(
            transaction_id=transaction_id,
            actor=operator_actor(request),
            reason=data["reason"],
        )
        return Response(TransactionOutSerializer(tx).data)


class TransactionCheckNowView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=OperatorReasonInSerializer,
        responses={200: TransactionOutSerializer, **error_responses(404, 409, 413)},
        summary="Ask for a back-check of a PREPARED transaction at the next scan (admin or "
        "operator key; addition to api-v1)",
        description=(
            'The console\'s "check now": `next_check_timestamp` becomes now, so the next scan '
            "of its half queue checks it without waiting for the check interval or its check "
            "immunity (its producer group's check backoff and rate limit still apply). It is "
            "not a check: `check_times` is unchanged. The reason is required (400 "
            "`reason_required`) and kept in the audit log. 409 `transaction_not_prepared` "
            "(DISCARDED: resume its checks instead) or `transaction_already_resolved`." + _SCOPED
        ),
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        _operable(request, transaction_id)
        data = validated(OperatorReasonInputSerializer, request.data or {})
        tx = operator.transaction_check_now(
            transaction_id=transaction_id,
            reason=data["reason"],
            actor=operator_actor(request),
        )
        return Response(TransactionOutSerializer(tx).data)

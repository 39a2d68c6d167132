"""api-v1 endpoints. Each view validates its input, calls one service or selector, and
serializes the result; errors become the contract's body in ``broker.api.exceptions``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from broker import selectors, selectors_console, selectors_reconciliation
from broker.api import schema as _schema  # noqa: F401 - registers the OpenAPI corrections
from broker.api import serializers as s
from broker.api.permissions import (
    IsAdminKey,
    require_any_producer,
    require_consumer,
    require_producer,
)
from broker.api.shapes import represented, validated
from broker.errors import Forbidden
from broker.lookups import producer_group_require
from broker.services import admin, consumers, messages, operator, transactions


def _error(description: str) -> OpenApiResponse:
    """An error answer of the OpenAPI document: the contract's error body (``ErrorOut``)."""
    return OpenApiResponse(s.ErrorOutSerializer, description=f"{description} (error body)")


ERRORS = {
    400: _error("invalid input"),
    401: _error("missing or bad access key"),
    403: _error("not allowed for this access key"),
    406: _error("the Accept header excludes application/json, the only type answered"),
    503: _error("the database is unreachable; try again after Retry-After seconds"),
}
_EXTRA_ERRORS = {
    404: _error("unknown resource"),
    409: _error("conflict with the current state"),
    413: _error("body or properties too large"),
}


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The errors every operation may answer (``ERRORS``: 400, 401, 403, 406, 503) plus ``codes``
    (404, 409, 413), each with the contract's error body. An operation that reads a JSON body
    lists 413: every body passes the parser's size limit (``LimitedJSONParser``)."""
    return {**ERRORS, **{c: _EXTRA_ERRORS[c] for c in codes}}


class TransactionPagination(PageNumberPagination):
    """Pages of transactions: ``page`` and ``page_size`` validated first
    (``PageQuerySerializer``: a malformed or out-of-range value is 400, where DRF would
    silently use the default size); a page past the last is DRF's 404."""

    page_size = s.TRANSACTION_PAGE_DEFAULT
    page_size_query_param = "page_size"
    max_page_size = s.TRANSACTION_PAGE_MAX

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        """DRF's page of ``queryset``, after the query's page parameters passed
        ``PageQuerySerializer``. Raises ValidationError (400), NotFound (404 past the end)."""
        validated(s.PageQuerySerializer, request.query_params)
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


# --- Topics and groups (admin) ------------------------------------------------------------------


class AdminListCreateView(APIView):
    """An admin-only configuration resource (topics, producer groups, consumer groups).

    GET lists ``rows()`` through ``out_serializer``; POST validates ``in_serializer``, calls
    the one service ``create(**validated_data)`` and answers 201 with ``created_serializer``
    (``out_serializer`` if None). A subclass names these (``rows`` a selector and ``create`` a
    service, as ``staticmethod``) and the two summaries; its OpenAPI operations are built from
    them, the create's errors with ``create_errors`` (besides 400, 401, 403 and 503).
    """

    permission_classes = [IsAdminKey]
    in_serializer: type[Serializer]
    out_serializer: type[Serializer]
    created_serializer: type[Serializer] | None = None
    create_errors: tuple[int, ...] = (409, 413)
    list_summary: str
    create_summary: str
    rows: Callable[[], Any]
    create: Callable[..., Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        extend_schema_view(
            get=extend_schema(
                responses={200: cls.out_serializer(many=True), **ERRORS}, summary=cls.list_summary
            ),
            post=extend_schema(
                request=cls.in_serializer,
                responses={
                    201: cls.created_serializer or cls.out_serializer,
                    **_errors(*cls.create_errors),
                },
                summary=cls.create_summary,
            ),
        )(cls)

    def get(self, request: Request) -> Response:
        return Response(self.out_serializer(self.rows(), many=True).data)

    def post(self, request: Request) -> Response:
        created = self.create(**validated(self.in_serializer, request.data))
        out = self.created_serializer or self.out_serializer
        return Response(out(created).data, status=status.HTTP_201_CREATED)


class TopicListCreateView(AdminListCreateView):
    """User topics (system topics are not listed); a new one gets its consume queues."""

    in_serializer = s.TopicInSerializer
    out_serializer = s.TopicOutSerializer
    list_summary = "List topics"
    create_summary = "Create a topic"
    rows = staticmethod(selectors.topic_list)
    create = staticmethod(admin.topic_create)


class TopicDetailView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: s.TopicDetailOutSerializer, **_errors(404)},
        summary="A topic with each queue's min and max offset",
    )
    def get(self, request: Request, name: str) -> Response:
        topic = selectors.topic_get(name)
        topic.queues = selectors.topic_queue_offsets(topic)
        return Response(s.TopicDetailOutSerializer(topic).data)


class ProducerGroupListCreateView(AdminListCreateView):
    """Producer groups: the back-check target (check_url, or polling) of their half messages."""

    in_serializer = s.ProducerGroupInSerializer
    out_serializer = s.ProducerGroupOutSerializer
    created_serializer = s.ProducerGroupCreatedSerializer
    list_summary = "List producer groups"
    create_summary = "Create a producer group (its check_secret is shown in this answer only)"
    rows = staticmethod(selectors.producer_group_list)
    create = staticmethod(admin.producer_group_create)


class ProducerGroupDetailView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: s.ProducerGroupOutSerializer, **_errors(404)}, summary="A producer group"
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(s.ProducerGroupOutSerializer(selectors.producer_group_get(name)).data)

    @extend_schema(
        request=s.ProducerGroupPatchSerializer,
        responses={200: s.ProducerGroupOutSerializer, **_errors(404, 413)},
        summary="Change a producer group's check_url",
        description="The body is validated whole: `check_url` is required (null: the group's "
        "producers poll for checks).",
    )
    def patch(self, request: Request, name: str) -> Response:
        data = validated(s.ProducerGroupPatchSerializer, request.data)
        group = admin.producer_group_update(name=name, check_url=data["check_url"])
        return Response(s.ProducerGroupOutSerializer(group).data)


class ConsumerGroupListCreateView(AdminListCreateView):
    """Consumer groups: each has its own queue offsets and dead-letter topic %DLQ%{group}."""

    in_serializer = s.ConsumerGroupInSerializer
    out_serializer = s.ConsumerGroupOutSerializer
    list_summary = "List consumer groups"
    create_summary = "Create a consumer group"
    rows = staticmethod(selectors.consumer_group_list)
    create = staticmethod(admin.consumer_group_create)


# --- Normal messages ----------------------------------------------------------------------------


class MessageListCreateView(APIView):
    @extend_schema(
        request=s.MessageSendInSerializer,
        responses={201: s.SendResultSerializer, **_errors(404, 413)},
        summary="Send a normal message",
    )
    def post(self, request: Request) -> Response:
        require_any_producer(request)
        data = validated(s.MessageSendInSerializer, request.data)
        group = data.pop("producer_group", "")
        if group:
            require_producer(request, group)
            producer_group_require(group)
        elif request.user.producer_groups:
            group = min(request.user.producer_groups)
        message = messages.message_send(**data, producer_group=group)
        return Response(
            represented(s.SendResultSerializer, message), status=status.HTTP_201_CREATED
        )

    @extend_schema(
        parameters=[s.MessageQuerySerializer],
        responses={200: s.MessageOutSerializer(many=True), **ERRORS},
        summary="Messages of a topic by key (RocketMQ queryMessage)",
    )
    def get(self, request: Request) -> Response:
        require_any_producer(request)
        query = validated(s.MessageQuerySerializer, request.query_params)
        found = selectors.messages_by_key(
            topic=query["topic"], key=query["key"], producer_groups=request.user.producer_scope()
        )[:1000]
        return Response(s.MessageOutSerializer(found, many=True).data)


class MessageDetailView(APIView):
    @extend_schema(
        responses={200: s.MessageOutSerializer, **_errors(404)},
        summary="One stored message, whatever its topic (RocketMQ viewMessage)",
    )
    def get(self, request: Request, msg_id: str) -> Response:
        require_any_producer(request)
        message = selectors.message_get(msg_id, producer_groups=request.user.producer_scope())
        return Response(s.MessageOutSerializer(message).data)


# --- Transactions -------------------------------------------------------------------------------


class TransactionListCreateView(APIView):
    pagination_class = TransactionPagination

    @extend_schema(
        request=s.TransactionPrepareInSerializer,
        responses={
            201: s.TransactionPrepareOutSerializer,
            200: OpenApiResponse(
                s.TransactionPrepareOutSerializer, description="msg_id already stored"
            ),
            **_errors(404, 409, 413),
        },
        summary="Send a half message",
    )
    def post(self, request: Request) -> Response:
        data = validated(s.TransactionPrepareInSerializer, request.data)
        require_producer(request, data["producer_group"])
        tx, created = transactions.transaction_prepare(**data)
        return Response(
            represented(s.TransactionPrepareOutSerializer, tx),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        parameters=[s.TransactionListQuerySerializer],
        responses={200: s.TransactionOutSerializer(many=True), **_errors(404)},
        summary="List transactions (paginated)",
        description="Pages of `page_size` (default 100, at most 1000) transactions, oldest "
        "first: `count`, the `next` and `previous` pages' URLs (null at either end) and "
        "`results`. A `page` past the last (or not a number) is 404 `not_found`.",
    )
    def get(self, request: Request) -> Response:
        require_any_producer(request)
        query = validated(s.TransactionListQuerySerializer, request.query_params)
        qs = selectors.transaction_list(
            state=query.get("state"),
            producer_group=query.get("producer_group"),
            topic=query.get("topic"),
            producer_groups=request.user.producer_scope(),
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(s.TransactionOutSerializer(page, many=True).data)


def _transaction_readable(request: Request, transaction_id: str) -> Any:
    """The transaction, if this access key may read it (an admin key, or a key of its
    producer group). Raises NotFound (404), Forbidden (403)."""
    tx = selectors.transaction_get(transaction_id)
    if not request.user.may_produce(tx.producer_group):
        raise Forbidden("This access key may not read this producer group's transactions.")
    return tx


class TransactionDetailView(APIView):
    @extend_schema(
        responses={200: s.TransactionOutSerializer, **_errors(404)}, summary="One transaction"
    )
    def get(self, request: Request, transaction_id: str) -> Response:
        tx = _transaction_readable(request, transaction_id)
        return Response(s.TransactionOutSerializer(tx).data)


class TransactionTimelineView(APIView):
    @extend_schema(
        responses={200: s.TransactionTimelineOutSerializer, **_errors(404)},
        summary="A transaction's timeline from the broker's journals (addition to api-v1)",
        description="Half message stored, each back-check with its answer and latency, "
        "undelivered checks, discard, resume, the end and who sent it (producer, check answer, "
        "operator with reason), the delivered message and each consumer group's delivery. "
        "Oldest first; entries whose time is not journalled (acks) have timestamp null and "
        "come last. Readable by the keys that may read the transaction.",
    )
    def get(self, request: Request, transaction_id: str) -> Response:
        tx = _transaction_readable(request, transaction_id)
        timeline = selectors_console.transaction_timeline(tx.transaction_id)
        out = {"transaction_id": tx.transaction_id, "state": tx.state, "timeline": timeline}
        return Response(s.TransactionTimelineOutSerializer(out).data)


class TransactionEndView(APIView):
    @extend_schema(
        request=s.TransactionEndInSerializer,
        responses={200: s.TransactionEndOutSerializer, **_errors(404, 409, 413)},
        summary="End a transaction: commit, rollback or unknown",
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        data = validated(s.TransactionEndInSerializer, request.data)
        require_producer(request, data["producer_group"])
        tx = transactions.transaction_end(
            transaction_id=transaction_id,
            producer_group=data["producer_group"],
            action=data["action"],
            from_transaction_check=data["from_transaction_check"],
            remark=data["remark"],
        )
        return Response(represented(s.TransactionEndOutSerializer, tx))


def _operator_actor(request: Request) -> str:
    """Who an operator action is recorded as: ``operator:<access key name>``."""
    return f"operator:{request.user.name}"


class TransactionResolveView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        request=s.TransactionResolveInSerializer,
        responses={200: s.TransactionOutSerializer, **_errors(404, 409, 413)},
        summary="Commit or roll back a PREPARED or DISCARDED transaction by hand (admin key)",
        description=(
            "An operator resolves the transaction exactly once: commit delivers it to its "
            "topic and queue with its msg_id, rollback drops it; `resolved_by` becomes "
            "`operator`. The reason is required (400 `reason_required` when missing, null or "
            "blank) and kept in the audit trail with the access key's name. 409 "
            "`transaction_already_resolved` (with `details.state`, and what ended it: "
            "`resolved_by`, `resolved_timestamp`, `actor`, `reason`, `ended_by`) if it is "
            "COMMITTED or ROLLED_BACK, a repeat of this call included: nothing is delivered "
            "twice. Every call is in the audit log."
        ),
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        data = validated(s.TransactionResolveInputSerializer, request.data)
        tx = operator.transaction_operator_resolve(
            transaction_id=transaction_id,
            action=data["action"],
            reason=data["reason"] or "",
            actor=_operator_actor(request),
        )
        return Response(s.TransactionOutSerializer(tx).data)


class TransactionResumeCheckView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        request=s.TransactionResumeCheckInSerializer,
        responses={200: s.TransactionOutSerializer, **_errors(404, 409, 413)},
        summary="Resume the back-checks of a DISCARDED transaction (admin key)",
        description=(
            "RocketMQ's resumeCheckHalfMessage: the half message is re-appended to its half "
            "queue and the transaction is PREPARED again with `check_times` 0, checked at the "
            "next scan. Its `born_timestamp` is kept, so one older than "
            "HALFMOON_FILE_RESERVED_HOURS is discarded again at once. 409 "
            "`transaction_not_discarded` (with `details.state`, and for an ended transaction "
            "what ended it) otherwise. An optional `reason` is kept in the audit log."
        ),
    )
    def post(self, request: Request, transaction_id: str) -> Response:
        data = validated(s.TransactionResumeCheckInSerializer, request.data or {})
        tx = operator.transaction_resume_check(
            transaction_id=transaction_id,
            actor=_operator_actor(request),
            reason=data["reason"],
        )
        return Response(s.TransactionOutSerializer(tx).data)


# --- Consumers ----------------------------------------------------------------------------------


class AckView(APIView):
    @extend_schema(
        request=s.AckInSerializer,
        responses={200: s.AckOutSerializer, **_errors(404, 413)},
        summary="Ack received messages",
        description="404 `consumer_group_not_found` for an unknown consumer group. A receipt "
        "handle that is unknown, expired or already acked is listed in `failed` with its code.",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(s.AckInSerializer, request.data)
        acked, failed = consumers.messages_ack(
            consumer_group=group, receipt_handles=data["receipt_handles"]
        )
        return Response({"acked": acked, "failed": failed})


# --- Reconciliation (admin; an addition to api-v1) ----------------------------------------------


class _ReconciliationRunView(APIView):
    """One reconciliation run as ``ReconciliationRunOutSerializer``, with the page of its stored
    anomalies the query asks for (``kind``, ``limit``, ``offset``)."""

    permission_classes = [IsAdminKey]

    @staticmethod
    def answer(request: Request, run_fetch: Callable[[], Any]) -> Response:
        """Validate the query (400 ``invalid_input``), then fetch the run with ``run_fetch``
        (which raises the 404) and answer it with the page of anomalies asked for."""
        query = validated(s.ReconciliationRunQuerySerializer, request.query_params)
        run = run_fetch()
        anomalies = selectors_reconciliation.reconciliation_anomalies(run, kind=query.get("kind"))
        run.anomalies_matching = anomalies.count()
        run.anomalies_page = list(anomalies[query["offset"] : query["offset"] + query["limit"]])
        return Response(s.ReconciliationRunOutSerializer(run).data)


_RUN_DESCRIPTION = (
    "The window of half message store times the run judged (`since`..`until`, ms) as of the "
    "archive's watermark (`as_of`), transactions by final state, anomalies by kind (all of "
    "them) and the stored anomalies (at most HALFMOON_RECONCILE_MAX_STORED_ANOMALIES; all are "
    "in the Parquet output at `output_uri`), filtered by `kind` and paged with `limit` "
    "(default 1000, at most 10000) and `offset`; `anomalies_matching` counts the stored ones "
    "that match `kind`. Admin key."
)


def _run_schema(summary: str, note: str) -> Callable[[Any], Any]:
    """The OpenAPI operation of a run endpoint: its query, answer and errors, and
    ``_RUN_DESCRIPTION`` followed by ``note``."""
    return extend_schema(
        parameters=[s.ReconciliationRunQuerySerializer],
        responses={200: s.ReconciliationRunOutSerializer, **_errors(404)},
        summary=summary,
        description=f"{_RUN_DESCRIPTION} {note}",
    )


class ReconciliationRunLatestView(_ReconciliationRunView):
    """``GET /api/v1/reconciliation/runs/latest``: the latest SUCCEEDED run."""

    @_run_schema(
        "The latest successful reconciliation run (admin key)",
        "The latest run that SUCCEEDED (a running or failed run has no report); 404 "
        "`reconciliation_run_not_found` before the first.",
    )
    def get(self, request: Request) -> Response:
        return self.answer(request, selectors_reconciliation.reconciliation_run_latest)


class ReconciliationRunListView(APIView):
    """``GET /api/v1/reconciliation/runs``: the runs, newest first, whatever their state."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        parameters=[s.ReconciliationRunsQuerySerializer],
        responses={200: s.ReconciliationRunsOutSerializer, **_errors()},
        operation_id="v1_reconciliation_runs_list",
        summary="Reconciliation runs, newest first (admin key)",
        description="Every run whatever its state, without anomalies: the first is the latest "
        "decision, a run or a `skipped` one that says why (`reason`) and when the oldest "
        "transaction not yet judged settles (`settles_timestamp`). `limit` runs (default 20, "
        "at most 100) with an id below `before`; `next_before` pages on, null on the last "
        "page. Admin key.",
    )
    def get(self, request: Request) -> Response:
        query = validated(s.ReconciliationRunsQuerySerializer, request.query_params)
        page = selectors_reconciliation.reconciliation_runs_page(
            before=query.get("before"), per_page=query["limit"]
        )
        body = {"runs": page.runs, "next_before": page.next_before}
        return Response(s.ReconciliationRunsOutSerializer(body).data)


class ReconciliationRunDetailView(_ReconciliationRunView):
    """``GET /api/v1/reconciliation/runs/{id}``: one run, whatever its state."""

    @_run_schema(
        "One reconciliation run, whatever its state (admin key)",
        "A `running` run has no counts yet, a `failed` one says why in `error`, a `skipped` "
        "one (not run: nothing archived or settled yet) in `reason`; 404 "
        "`reconciliation_run_not_found` for an unknown id.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        return self.answer(request, lambda: selectors_reconciliation.reconciliation_run_get(run_id))

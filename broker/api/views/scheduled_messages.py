"""api-v1 additions: delay and timer messages (``docs/api.md`` "Scheduled messages"): the list
by due time, one with its timeline, a producer's recall by recall handle (RocketMQ 5.3
``RecallMessage``) and an operator's recall by msg_id with a reason (audited). Reads: an admin
key, a key with producer groups (theirs), a key with operator grants (the producer groups it
operates). Who may recall: ``broker.services.timers.recall.scheduled_message_recall_check``,
the rule of gRPC's RecallMessage."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import operator_actor, request_caller, require_transaction_reader
from broker.api.serializers.scheduled_messages import (
    RecallInSerializer,
    ScheduledMessageDetailOutSerializer,
    ScheduledMessageOutSerializer,
    ScheduledMessageQuerySerializer,
)
from broker.api.serializers.transactions import (
    OperatorReasonInputSerializer,
    OperatorReasonInSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.api.views.transactions import TransactionPagination
from broker.errors import not_found
from broker.models import ScheduledMessage
from broker.rules.clock import now_ms
from broker.selectors.scheduled_messages import (
    scheduled_message_of,
    scheduled_message_timeline,
    scheduled_messages,
)
from broker.services.timers.recall import (
    scheduled_message_recall_by_handle,
    scheduled_message_recall_by_operator,
)


def _readable(request: Request, msg_id: str) -> ScheduledMessage:
    """The latest scheduled message of ``msg_id``, if this key may read its producer group's
    messages (admin, the group's producer key, or a key operating the group).

    Raises:
        NotFound: ``scheduled_message_not_found`` (also for another group's).
    """
    row = scheduled_message_of(msg_id)
    if row is None or not request.user.may_read_transactions(row.producer_group):
        raise not_found("scheduled_message", msg_id)
    return row


def _with_timeline(row: ScheduledMessage) -> ScheduledMessage:
    """``row`` with its ``timeline`` (``scheduled_message_timeline``) for the detail
    serializer."""
    row.timeline = scheduled_message_timeline(row, now=now_ms())
    return row


class ScheduledMessageListView(APIView):
    pagination_class = TransactionPagination

    @extend_schema(
        parameters=[ScheduledMessageQuerySerializer],
        responses={200: ScheduledMessageOutSerializer(many=True), **error_responses(404)},
        summary="Delay and timer messages by due time (paginated; addition to api-v1)",
        description="Scheduled messages, earliest due first (then commit log offset), by "
        "`topic`, `state` (SCHEDULED, DELIVERED, RECALLED; absent: every state), `key` (one "
        "of its keys), `msg_id`, `producer_group` and due time `[due_after, due_before)` (ms). "
        "Pages as `GET /transactions`: `page`, `page_size` (default 100, at most 1000), "
        "`count`, `next`, `previous`, `results`; a page past the last is 404 `not_found`. An "
        "admin key sees every message, a producer key its groups', a key with operator grants "
        "also the producer groups it operates (a key with none of these: 403).",
    )
    def get(self, request: Request) -> Response:
        require_transaction_reader(request)
        q = validated(ScheduledMessageQuerySerializer, request.query_params)
        rows = scheduled_messages(
            topic=q.get("topic", ""),
            key=q.get("key", ""),
            msg_id=q.get("msg_id", ""),
            state=q.get("state", ""),
            due_after=q.get("due_after"),
            due_before=q.get("due_before"),
            producer_groups=request.user.producer_scope(),
            operator_access_key_id=request.user.key_id,
        )
        if "producer_group" in q:
            rows = rows.filter(producer_group=q["producer_group"])
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(ScheduledMessageOutSerializer(page, many=True).data)


class ScheduledMessageDetailView(APIView):
    @extend_schema(
        responses={200: ScheduledMessageDetailOutSerializer, **error_responses(404)},
        summary="One scheduled message and its timeline (addition to api-v1)",
        description="The latest scheduled message of this msg id: its state, due time, recall "
        "handle and timeline (sent, due, delivered with the delivered copy's commit log "
        "offset, or recalled by whom and why). 404 `scheduled_message_not_found` (also for "
        "a producer group the key may not read).",
    )
    def get(self, request: Request, msg_id: str) -> Response:
        require_transaction_reader(request)
        row = _with_timeline(_readable(request, msg_id))
        return Response(ScheduledMessageDetailOutSerializer(row).data)


class ScheduledMessageRecallView(APIView):
    @extend_schema(
        request=RecallInSerializer,
        responses={200: ScheduledMessageOutSerializer, **error_responses(404, 409, 413)},
        summary="Recall a delay message by its recall handle (RocketMQ 5.3 RecallMessage)",
        description="Takes back the message the `recall_handle` (as its send answered it) "
        "names, which must be of `topic`: it is never delivered, and the answer is the message, "
        "`state` RECALLED, `recalled_by` `producer:<access key name>`. Again: 200, unchanged. "
        "400 `invalid_recall_handle` (not a recall handle, or of another topic: its content "
        "no schema states); 403 a key that may not act for the message's producer group; 404 "
        "`scheduled_message_not_found`; 409 `recall_too_late` once it is due or delivered.",
    )
    def post(self, request: Request) -> Response:
        data = validated(RecallInSerializer, request.data)
        row = scheduled_message_recall_by_handle(
            caller=request_caller(request),
            topic=data["topic"],
            recall_handle=data["recall_handle"],
            recalled_by=f"producer:{request.user.name}",
        )
        return Response(ScheduledMessageOutSerializer(row).data)


class ScheduledMessageOperatorRecallView(APIView):
    @extend_schema(
        request=OperatorReasonInSerializer,
        responses={200: ScheduledMessageOutSerializer, **error_responses(404, 409, 413)},
        operation_id="v1_scheduled_messages_operator_recall_create",
        summary="An operator's recall of a scheduled message, with a reason (audited)",
        description="Takes back the latest scheduled message of this msg id before its time, "
        "as `operator:<access key name>`, written to the audit log with the reason "
        "(`recall-message`, via `api`). An admin key, a key that may act for the message's "
        "producer group, or one with an operator grant for it (else 403). Again: 200, "
        "unchanged. 400 `reason_required`; 404 `scheduled_message_not_found`; 409 "
        "`recall_too_late` once it is due or delivered.",
    )
    def post(self, request: Request, msg_id: str) -> Response:
        data = validated(OperatorReasonInputSerializer, request.data or {})
        row = scheduled_message_recall_by_operator(
            caller=request_caller(request),
            operates=request.user.operator_scope,
            msg_id=msg_id,
            reason=data["reason"],
            actor=operator_actor(request),
        )
        return Response(ScheduledMessageOutSerializer(row).data)

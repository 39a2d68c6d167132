"""api-v1 additions: a consumer group's operations (``docs/api.md`` "Consumer-group
operations"): its offsets, a reset of its offsets to a time and "skip the backlog" (previewed,
then applied with a reason), a resend of one message to the group, and its dead-letter queue
(list, resend one, preview a frozen set and apply it with progress). Every write goes through
``broker.services.consumption`` (``offset_resets``, ``redelivery``, ``dead_letters``), which
audits it (actor ``operator:<key name>``, via ``api``). An admin key operates every consumer
group; a key with operator grants only its own (another group: 403). Reads need an admin or
operator key."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsOperatorKey, operator_actor, require_consumer_group_operator
from broker.api.serializers.consumer_group_ops import (
    BacklogSkipInSerializer,
    ConsumerGroupOperationOutSerializer,
    DeadLetterOutSerializer,
    DeadLetterQuerySerializer,
    DeadLettersPreviewInSerializer,
    GroupOffsetsQuerySerializer,
    GroupQueueOffsetOutSerializer,
    OffsetResetInSerializer,
    ResendInputSerializer,
    ResendInSerializer,
)
from broker.api.serializers.transactions import (
    OperatorReasonInputSerializer,
    OperatorReasonInSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.errors import NotFound
from broker.models import AuditEntry
from broker.selectors.consumer_groups import (
    DEAD_LETTER_SET_ACTIONS,
    OFFSET_RESET_ACTIONS,
    consumer_group_of_entry,
    consumer_group_offsets,
    consumer_group_op_get,
    dead_letters,
    message_to_resend,
)
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

API = AuditEntry.Via.API
_SCOPED = (
    " An admin key operates every consumer group; a key with operator grants "
    "(`create_access_key --operator-consumer-group G`) only its own (another group: 403 "
    "`permission_denied`)."
)
Out = ConsumerGroupOperationOutSerializer


def _allowed(request: Request) -> frozenset[str] | None:
    return request.user.operator_scope.consumer_groups


def _entry_of_group(group: str, entry_id: int, actions: tuple[str, ...]) -> AuditEntry:
    """The operation ``entry_id`` of ``group`` (another group's is not found here)."""
    entry = consumer_group_op_get(entry_id, actions)
    if consumer_group_of_entry(entry) != group:
        kind = "dead_letter_resend" if actions == DEAD_LETTER_SET_ACTIONS else "offset_reset"
        raise NotFound(
            f"Consumer group {group} has no {kind.replace('_', ' ')} {entry_id}.",
            code=f"{kind}_not_found",
            details={"id": entry_id},
        )
    return entry


class ConsumerGroupOffsetsView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        parameters=[GroupOffsetsQuerySerializer],
        responses={200: GroupQueueOffsetOutSerializer(many=True), **error_responses(404)},
        summary="A consumer group's offsets per queue with lag (admin or operator key; "
        "addition to api-v1)",
        description="By topic then queue id: the next queue offset the group has not taken, "
        "the queue's max offset and the lag. 404 `consumer_group_not_found`.",
    )
    def get(self, request: Request, group: str) -> Response:
        query = validated(GroupOffsetsQuerySerializer, request.query_params)
        consumer_group_get(group)
        rows = consumer_group_offsets(consumer_group=group, topic=query.get("topic"))
        return Response(GroupQueueOffsetOutSerializer(rows, many=True).data)


class OffsetResetCreateView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=OffsetResetInSerializer,
        responses={201: Out, **error_responses(404, 413)},
        summary="Preview a reset of a consumer group's offsets to a time (admin or operator "
        "key; addition to api-v1)",
        description=(
            "RocketMQ resetOffsetByTime, as a dry run: per queue the group has an offset on, "
            "the current offset, the new one (the first message stored at or after "
            "`timestamp`, the queue end if none) and how many messages will be delivered again "
            "(`redeliver`) or skipped (`skip`), frozen in `scope.queues`; nothing changes until "
            "`POST .../offset-resets/{id}/apply`. 400 `invalid_input`, `no_offsets`; 404 "
            "`consumer_group_not_found`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(OffsetResetInSerializer, request.data)
        entry = offset_reset_preview(
            consumer_group=group,
            timestamp=data["timestamp"],
            topic=data.get("topic"),
            actor=operator_actor(request),
            via=API,
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_201_CREATED)


class BacklogSkipCreateView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=BacklogSkipInSerializer,
        responses={201: Out, **error_responses(404, 413)},
        summary="Preview skipping a consumer group's backlog (admin or operator key; addition "
        "to api-v1)",
        description=(
            'The dashboard\'s "skip accumulated", as a dry run: an offset reset (`action` '
            "`skip-backlog`) whose new offsets are the queue ends, with the messages it skips "
            "per queue; applied with `POST .../offset-resets/{id}/apply`. An offset is never "
            "moved backward: a queue the group has passed meanwhile is left as it is. 400 "
            "`no_offsets`; 404 `consumer_group_not_found`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(BacklogSkipInSerializer, request.data or {})
        entry = backlog_skip_preview(
            consumer_group=group,
            topic=data.get("topic"),
            actor=operator_actor(request),
            via=API,
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_201_CREATED)


class OffsetResetDetailView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        responses={200: Out, **error_responses(404)},
        summary="An offset reset or skip and its plan (admin or operator key; addition to api-v1)",
        description="404 `offset_reset_not_found` (also for another group's).",
    )
    def get(self, request: Request, group: str, reset_id: int) -> Response:
        return Response(Out(_entry_of_group(group, reset_id, OFFSET_RESET_ACTIONS)).data)


class OffsetResetApplyView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=OperatorReasonInSerializer,
        responses={200: Out, **error_responses(404, 409, 413)},
        summary="Apply a previewed offset reset or skip (admin or operator key; addition to "
        "api-v1)",
        description=(
            "Exactly the previewed plan, atomically against concurrent receives: a queue moved "
            "back keeps its offset and its previewed messages are delivered to the group once "
            "more (as attempt 1; an in-flight receipt handle of one of them no longer acks); a "
            "queue moved forward gets max(its offset now, the new one). `counts`: "
            "`{redelivered, skipped}`. 400 `reason_required`; 404 `offset_reset_not_found`; "
            "409 `offset_reset_applied`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str, reset_id: int) -> Response:
        require_consumer_group_operator(request, group)
        _entry_of_group(group, reset_id, OFFSET_RESET_ACTIONS)
        data = validated(OperatorReasonInputSerializer, request.data or {})
        entry = offset_reset_apply(
            reset_id=reset_id,
            reason=data.get("reason"),
            actor=operator_actor(request),
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data)


class ResendCreateView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=ResendInSerializer,
        responses={201: Out, **error_responses(404, 413)},
        summary="Resend one message to one consumer group (admin or operator key; addition to "
        "api-v1)",
        description=(
            "The message `msg_id` (on `topic` when given: the first stored, dead-letter copies "
            "left out) becomes visible to this group only, "
            "now; its next receive hands it out as attempt 1. 400 `reason_required`, "
            "`invalid_input`; 403 `system_topic`; 404 `consumer_group_not_found`, "
            "`message_not_found`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(ResendInputSerializer, request.data)
        message = message_to_resend(msg_id=data["msg_id"], topic=data.get("topic"))
        entry = message_resend(
            consumer_group=group,
            commit_log_offset=message.pk,
            reason=data.get("reason"),
            actor=operator_actor(request),
            via=API,
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_201_CREATED)


class DeadLetterListView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        parameters=[DeadLetterQuerySerializer],
        responses={200: DeadLetterOutSerializer(many=True), **error_responses(404)},
        summary="A consumer group's dead letters (admin or operator key; addition to api-v1)",
        description="The messages on `%DLQ%{group}`, newest first (by commit log offset), each "
        "with its original msg id and topic, the attempt it was dead-lettered at and how often "
        "an operator resent it. Page with `before` = the last `commit_log_offset`. 404 "
        "`consumer_group_not_found`.",
    )
    def get(self, request: Request, group: str) -> Response:
        query = validated(DeadLetterQuerySerializer, request.query_params)
        consumer_group_get(group)
        rows = dead_letters(consumer_group=group, before=query.get("before"), limit=query["limit"])
        return Response(DeadLetterOutSerializer(rows, many=True).data)


class DeadLetterResendView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=OperatorReasonInSerializer,
        responses={201: Out, **error_responses(404, 413)},
        summary="Resend one dead letter to its consumer group (admin or operator key; "
        "addition to api-v1)",
        description=(
            "The ORIGINAL message of the dead letter at `commit_log_offset` (of its copy on "
            "`%DLQ%{group}`) becomes visible to the group now, as attempt 1. 400 "
            "`reason_required`; 404 `dead_letter_not_found`, `original_message_not_found`."
            + _SCOPED
        ),
    )
    def post(self, request: Request, group: str, commit_log_offset: int) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(OperatorReasonInputSerializer, request.data or {})
        entry = dead_letter_resend(
            consumer_group=group,
            commit_log_offset=commit_log_offset,
            reason=data.get("reason"),
            actor=operator_actor(request),
            via=API,
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_201_CREATED)


class DeadLetterSetCreateView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=DeadLettersPreviewInSerializer,
        responses={201: Out, **error_responses(404, 413)},
        summary="Preview resending a set of dead letters (admin or operator key; addition to "
        "api-v1)",
        description=(
            "Freezes the dead letters to resend: `commit_log_offsets` (of their DLQ copies) or, "
            "without it, every dead letter stored now (at most 10,000); dead letters arriving "
            "later are never in it. 400 `dead_letters_empty`, `dead_letters_too_many`; 404 "
            "`consumer_group_not_found`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(DeadLettersPreviewInSerializer, request.data or {})
        entry = dead_letters_preview(
            consumer_group=group,
            commit_log_offsets=data.get("commit_log_offsets"),
            actor=operator_actor(request),
            via=API,
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_201_CREATED)


class DeadLetterSetDetailView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        responses={200: Out, **error_responses(404)},
        summary="A dead-letter resend set and its progress (admin or operator key; addition "
        "to api-v1)",
        description="`processed` of `total` dead letters are no longer pending; `counts` "
        "`{done, already_ended, failed}`; `state` `done` when all are. 404 "
        "`dead_letter_resend_not_found`.",
    )
    def get(self, request: Request, group: str, resend_id: int) -> Response:
        return Response(Out(_entry_of_group(group, resend_id, DEAD_LETTER_SET_ACTIONS)).data)


class DeadLetterSetApplyView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=OperatorReasonInSerializer,
        responses={202: Out, **error_responses(404, 409, 413)},
        summary="Apply a previewed dead-letter resend set (admin or operator key; addition to "
        "api-v1)",
        description=(
            "`queued`: a worker resends the frozen dead letters one at a time (each original "
            "message visible to the group again, as attempt 1); poll `GET "
            ".../dead-letter-resends/{id}`. Applying a queued or running set again resumes it "
            "(resent ones are skipped). 400 `reason_required`; 404 "
            "`dead_letter_resend_not_found`; 409 `dead_letter_resend_done`." + _SCOPED
        ),
    )
    def post(self, request: Request, group: str, resend_id: int) -> Response:
        require_consumer_group_operator(request, group)
        _entry_of_group(group, resend_id, DEAD_LETTER_SET_ACTIONS)
        data = validated(OperatorReasonInputSerializer, request.data or {})
        entry = dead_letters_apply(
            resend_id=resend_id,
            reason=data.get("reason"),
            actor=operator_actor(request),
            allowed_consumer_groups=_allowed(request),
        )
        return Response(Out(entry).data, status=status.HTTP_202_ACCEPTED)

"""api-v1 additions: a FIFO consumer group's blocked message groups (``docs/api.md``
"Blocked message groups"): the list (``broker.selectors.blocked_message_groups``) and an
operator's dead-letter of a blocked head, with a reason and audit
(``broker.services.consumption.blocked_message_groups``; actor ``operator:<key name>``, via
``api``). Reads need an admin or operator key; the action an admin key or a key operating the
group (another group: 403)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsOperatorKey, operator_actor, require_consumer_group_operator
from broker.api.serializers.blocked_message_groups import (
    BlockedMessageGroupsOutSerializer,
    BlockedMessageGroupsQuerySerializer,
    HeadDeadLetterInputSerializer,
    HeadDeadLetterInSerializer,
)
from broker.api.serializers.consumer_group_ops import ConsumerGroupOperationOutSerializer
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.models import AuditEntry
from broker.selectors.blocked_message_groups import blocked_message_groups
from broker.services.consumption.blocked_message_groups import (
    blocked_message_group_dead_letter,
    fifo_consumer_group_checked,
)


class BlockedMessageGroupListView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        parameters=[BlockedMessageGroupsQuerySerializer],
        responses={200: BlockedMessageGroupsOutSerializer, **error_responses(404, 409)},
        summary="A FIFO consumer group's blocked message groups (admin or operator key; "
        "addition to api-v1)",
        description=(
            "Per (topic, message group) whose head (its earliest message not acked or "
            "dead-lettered) has failed at least once (handed out again, or its invisible time "
            "ran out): the head, its attempts, since when it blocks (its first hand-out) and "
            "how many messages of the group wait behind it. Oldest blocked first, at most "
            "`limit` (100), `total` in all. 404 `consumer_group_not_found`; 409 "
            "`consumer_group_not_fifo`."
        ),
    )
    def get(self, request: Request, group: str) -> Response:
        query = validated(BlockedMessageGroupsQuerySerializer, request.query_params)
        row = fifo_consumer_group_checked(group)
        page = blocked_message_groups(
            consumer_group=group,
            max_delivery_attempts=row.max_delivery_attempts,
            limit=query["limit"],
        )
        body = {
            "consumer_group": group,
            "fifo": True,
            "total": page.total,
            "blocked_message_groups": page.groups,
        }
        return Response(BlockedMessageGroupsOutSerializer(body).data)


class HeadDeadLetterView(APIView):
    permission_classes = [IsOperatorKey]

    @extend_schema(
        request=HeadDeadLetterInSerializer,
        responses={201: ConsumerGroupOperationOutSerializer, **error_responses(404, 409, 413)},
        summary="Send a blocked message group's head to the DLQ (admin or operator key; "
        "addition to api-v1)",
        description=(
            "The head of `message_group` of `topic` moves to `%DLQ%{group}` now, as a "
            "consumer's dead-letter of the delivery does (a consumer holding it loses its "
            "receipt handle); the group's next message is then delivered. Audited "
            "`dead-letter-head` with the reason. 400 `reason_required`, `invalid_input`; 404 "
            "`consumer_group_not_found`; 409 `consumer_group_not_fifo`, "
            "`message_group_not_blocked` (acked, dead-lettered or not failed since), "
            "`message_group_head_changed` (`msg_id` given and no longer the head). An admin key "
            "operates every consumer group; a key with operator grants only its own (another "
            "group: 403 `permission_denied`)."
        ),
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer_group_operator(request, group)
        data = validated(HeadDeadLetterInputSerializer, request.data)
        entry = blocked_message_group_dead_letter(
            consumer_group=group,
            topic=data["topic"],
            message_group=data["message_group"],
            msg_id=data.get("msg_id"),
            reason=data.get("reason"),
            actor=operator_actor(request),
            via=AuditEntry.Via.API,
            allowed_consumer_groups=request.user.operator_scope.consumer_groups,
        )
        return Response(
            ConsumerGroupOperationOutSerializer(entry).data, status=status.HTTP_201_CREATED
        )

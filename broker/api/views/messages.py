"""api-v1 normal messages: send (now, or for a later time: a delay message), list by key, one
by msg id, and what a consumer does to a received message: ack, change its invisible
duration, forward it to the dead-letter topic."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import (
    require_any_producer,
    require_consumer,
    sender_group,
)
from broker.api.serializers.messages import (
    AckInSerializer,
    AckOutSerializer,
    ChangeInvisibleDurationInSerializer,
    ChangeInvisibleDurationOutSerializer,
    DeadLetterInSerializer,
    MessageOutSerializer,
    MessageQuerySerializer,
    MessageSendInSerializer,
    SendResultSerializer,
)
from broker.api.shapes import represented, validated
from broker.api.views.base import ERRORS, error_responses
from broker.constants import SEND_OK
from broker.models import Message, ScheduledMessage
from broker.rules.timers import recall_handle_of
from broker.selectors.messages import message_at, message_get, messages_by_key
from broker.services.consumption import deliveries
from broker.services.consumption.receive import messages_ack
from broker.services.timers.schedule import message_send_timed


def send_result_body(stored: Message | ScheduledMessage) -> dict[str, Any]:
    """The SendResult of a send (``SendResultSerializer``): a stored message's, or for a
    delay message that waits, its queue on its topic, its offsets on RMQ_SYS_WHEEL_TIMER,
    its due time, state and recall handle (``recall_handle_of``, as gRPC answers it)."""
    if isinstance(stored, Message):
        return represented(SendResultSerializer, stored)
    waiting = message_at(stored.commit_log_offset)
    return {
        "status": SEND_OK,
        "msg_id": stored.msg_id,
        "topic": stored.topic,
        "queue_id": stored.queue_id,
        "queue_offset": waiting.queue_offset if waiting is not None else 0,
        "commit_log_offset": stored.commit_log_offset,
        "delivery_timestamp": stored.delivery_timestamp,
        "state": stored.state,
        "recall_handle": recall_handle_of(
            topic=stored.topic, delivery_timestamp=stored.delivery_timestamp, msg_id=stored.msg_id
        ),
    }


class MessageListCreateView(APIView):
    @extend_schema(
        request=MessageSendInSerializer,
        responses={201: SendResultSerializer, **error_responses(404, 413)},
        summary="Send a normal message, now or at a later time (a delay message)",
        description="With `deliver_at` (ms since the epoch) or `delay_level` (1..18, not "
        "both: 400 `delivery_time_conflict`) a later time: the message is stored now and "
        "delivered then (`state` SCHEDULED, a `recall_handle`); now or past: a normal send. "
        "400 `illegal_delivery_time` more than HALFMOON_TIMER_MAX_DELAY_SEC ahead (a setting "
        "and the clock: no schema states it), `illegal_delay_level`. With `msg_id`, the same "
        "msg_id again by the same producer group to the same topic stores nothing new and "
        "answers the stored message. 400 `message_type_mismatch` when the topic's "
        "`message_type` does not accept the message (NORMAL without a time, DELAY with one, "
        "due or not; MIXED accepts both): the topic's state, no schema states it.",
    )
    def post(self, request: Request) -> Response:
        require_any_producer(request)
        data = validated(MessageSendInSerializer, request.data)
        group = sender_group(request, data.pop("producer_group", ""))
        stored = message_send_timed(**data, producer_group=group)
        return Response(send_result_body(stored), status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[MessageQuerySerializer],
        responses={200: MessageOutSerializer(many=True), **ERRORS},
        summary="Messages of a topic by key (RocketMQ queryMessage)",
    )
    def get(self, request: Request) -> Response:
        require_any_producer(request)
        query = validated(MessageQuerySerializer, request.query_params)
        found = messages_by_key(
            topic=query["topic"], key=query["key"], producer_groups=request.user.producer_scope()
        )[:1000]
        return Response(MessageOutSerializer(found, many=True).data)


class MessageDetailView(APIView):
    @extend_schema(
        responses={200: MessageOutSerializer, **error_responses(404)},
        summary="One stored message, whatever its topic (RocketMQ viewMessage)",
    )
    def get(self, request: Request, msg_id: str) -> Response:
        require_any_producer(request)
        message = message_get(msg_id, producer_groups=request.user.producer_scope())
        return Response(MessageOutSerializer(message).data)


class AckView(APIView):
    @extend_schema(
        request=AckInSerializer,
        responses={200: AckOutSerializer, **error_responses(404, 413)},
        summary="Ack received messages",
        description="404 `consumer_group_not_found` for an unknown consumer group. A receipt "
        "handle that is unknown, expired or already acked is listed in `failed` with its code.",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(AckInSerializer, request.data)
        acked, failed = messages_ack(consumer_group=group, receipt_handles=data["receipt_handles"])
        return Response({"acked": acked, "failed": failed})


class ChangeInvisibleDurationView(APIView):
    @extend_schema(
        request=ChangeInvisibleDurationInSerializer,
        responses={200: ChangeInvisibleDurationOutSerializer, **error_responses(404, 413)},
        summary="Change a received message's invisible duration",
        description="RocketMQ 5 ChangeInvisibleDuration: the message stays invisible to the "
        "group's receivers for `invisible_duration_ms` from now (0: visible at once), under the "
        "new `receipt_handle` answered; the old handle no longer works. 404 "
        "`consumer_group_not_found`, or `invalid_receipt_handle` for a handle that is unknown, "
        "another group's, acked, or superseded by a redelivery or a new handle.",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(ChangeInvisibleDurationInSerializer, request.data)
        changed = deliveries.delivery_invisible_change(consumer_group=group, **data)
        return Response(represented(ChangeInvisibleDurationOutSerializer, changed))


class DeadLetterView(APIView):
    @extend_schema(
        request=DeadLetterInSerializer,
        responses={204: None, **error_responses(404, 413)},
        summary="Forward a received message to the dead-letter topic",
        description="RocketMQ 5 ForwardMessageToDeadLetterQueue: the message moves to "
        "`%DLQ%{group}` now, whatever its delivery attempt, and is not delivered to the group "
        "again. 404 `consumer_group_not_found`, or `invalid_receipt_handle` for a handle that "
        "is unknown, another group's, acked, or superseded by a redelivery or a new handle.",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(DeadLetterInSerializer, request.data)
        deliveries.delivery_dead_letter(consumer_group=group, **data)
        return Response(status=status.HTTP_204_NO_CONTENT)

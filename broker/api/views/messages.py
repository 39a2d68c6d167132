"""api-v1 normal messages: send, list by key, one by msg id, and a consumer's ack."""

from __future__ import annotations

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
    MessageOutSerializer,
    MessageQuerySerializer,
    MessageSendInSerializer,
    SendResultSerializer,
)
from broker.api.shapes import represented, validated
from broker.api.views.base import ERRORS, error_responses
from broker.selectors.messages import message_get, messages_by_key
from broker.services import consumers, messages


class MessageListCreateView(APIView):
    @extend_schema(
        request=MessageSendInSerializer,
        responses={201: SendResultSerializer, **error_responses(404, 413)},
        summary="Send a normal message",
    )
    def post(self, request: Request) -> Response:
        require_any_producer(request)
        data = validated(MessageSendInSerializer, request.data)
        group = sender_group(request, data.pop("producer_group", ""))
        message = messages.message_send(**data, producer_group=group)
        return Response(represented(SendResultSerializer, message), status=status.HTTP_201_CREATED)

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
        acked, failed = consumers.messages_ack(
            consumer_group=group, receipt_handles=data["receipt_handles"]
        )
        return Response({"acked": acked, "failed": failed})

"""api-v1 topics, producer groups and consumer groups (admin key for writes)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import (
    IsAdminKey,
)
from broker.api.schema import RequiredBodySchema
from broker.api.serializers.topology import (
    ConsumerGroupInSerializer,
    ConsumerGroupOutSerializer,
    ConsumerGroupPatchSerializer,
    ProducerGroupCreatedSerializer,
    ProducerGroupInSerializer,
    ProducerGroupOutSerializer,
    ProducerGroupPatchSerializer,
    TopicDetailOutSerializer,
    TopicInSerializer,
    TopicOutSerializer,
    TopicPatchSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import AdminListCreateView, error_responses
from broker.selectors.topology import (
    consumer_group_get,
    consumer_group_list,
    producer_group_get,
    producer_group_list,
    topic_get,
    topic_list,
    topic_queue_offsets,
)
from broker.services.topology.writes import (
    consumer_group_create,
    consumer_group_update,
    producer_group_create,
    producer_group_update,
    topic_create,
    topic_update,
)


class TopicListCreateView(AdminListCreateView):
    """User topics (system topics are not listed); a new one gets its consume queues."""

    in_serializer = TopicInSerializer
    out_serializer = TopicOutSerializer
    list_summary = "List topics"
    create_summary = "Create a topic"
    rows = staticmethod(topic_list)
    create = staticmethod(topic_create)


class TopicDetailView(APIView):
    permission_classes = [IsAdminKey]
    schema = RequiredBodySchema()  # the PATCH's body: at least one field, never absent

    @extend_schema(
        responses={200: TopicDetailOutSerializer, **error_responses(404)},
        summary="A topic with each queue's min and max offset",
    )
    def get(self, request: Request, name: str) -> Response:
        topic = topic_get(name)
        topic.queues = topic_queue_offsets(topic)
        return Response(TopicDetailOutSerializer(topic).data)

    @extend_schema(
        request=TopicPatchSerializer,
        responses={200: TopicDetailOutSerializer, **error_responses(404, 413)},
        summary="Give a topic more queues or another message type (addition to api-v1)",
        description="`queue_nums`: at least its current number (400 `invalid_queue_nums` "
        "below), at most 1024; the new consume queues are created. `message_type`: the type "
        "the topic accepts from now on (NORMAL, FIFO, DELAY, TRANSACTION or MIXED), also when "
        "it holds messages; stored and waiting messages are delivered as they are. At least "
        "one of the two. The broker's own topics are not changed (404 `topic_not_found`). "
        "Other processes see the change once their cached topic expires "
        "(`HALFMOON_LOOKUP_CACHE_MS`).",
    )
    def patch(self, request: Request, name: str) -> Response:
        data = validated(TopicPatchSerializer, request.data)
        topic = topic_update(
            name=name, queue_nums=data.get("queue_nums"), message_type=data.get("message_type")
        )
        topic.queues = topic_queue_offsets(topic)
        return Response(TopicDetailOutSerializer(topic).data)


class ProducerGroupListCreateView(AdminListCreateView):
    """Producer groups: the back-check target (check_url, or polling) of their half messages."""

    in_serializer = ProducerGroupInSerializer
    out_serializer = ProducerGroupOutSerializer
    created_serializer = ProducerGroupCreatedSerializer
    list_summary = "List producer groups"
    create_summary = "Create a producer group (its check_secret is shown in this answer only)"
    rows = staticmethod(producer_group_list)
    create = staticmethod(producer_group_create)


class ProducerGroupDetailView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: ProducerGroupOutSerializer, **error_responses(404)},
        summary="A producer group",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(ProducerGroupOutSerializer(producer_group_get(name)).data)

    @extend_schema(
        request=ProducerGroupPatchSerializer,
        responses={200: ProducerGroupOutSerializer, **error_responses(404, 413)},
        summary="Change a producer group's check_url",
        description="The body is validated whole: `check_url` is required (null: the group's "
        "producers poll for checks).",
    )
    def patch(self, request: Request, name: str) -> Response:
        data = validated(ProducerGroupPatchSerializer, request.data)
        group = producer_group_update(name=name, check_url=data["check_url"])
        return Response(ProducerGroupOutSerializer(group).data)


class ConsumerGroupListCreateView(AdminListCreateView):
    """Consumer groups: each has its own queue offsets and dead-letter topic %DLQ%{group}."""

    in_serializer = ConsumerGroupInSerializer
    out_serializer = ConsumerGroupOutSerializer
    list_summary = "List consumer groups"
    create_summary = "Create a consumer group"
    rows = staticmethod(consumer_group_list)
    create = staticmethod(consumer_group_create)


class ConsumerGroupDetailView(APIView):
    permission_classes = [IsAdminKey]
    schema = RequiredBodySchema()  # the PATCH's body: at least one field, never absent

    @extend_schema(
        responses={200: ConsumerGroupOutSerializer, **error_responses(404)},
        summary="A consumer group (addition to api-v1)",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(ConsumerGroupOutSerializer(consumer_group_get(name)).data)

    @extend_schema(
        request=ConsumerGroupPatchSerializer,
        responses={200: ConsumerGroupOutSerializer, **error_responses(404, 413)},
        summary="Change a consumer group's max_delivery_attempts or fifo (addition to api-v1)",
        description="Deliveries already counted keep their count; the next failed one is "
        "compared with the new number (past it: moved to %DLQ%{group}). `fifo` true: each "
        "message group's messages are handed out in send order, the next after the previous "
        "is acked or dead-lettered. At least one of the two fields.",
    )
    def patch(self, request: Request, name: str) -> Response:
        data = validated(ConsumerGroupPatchSerializer, request.data)
        group = consumer_group_update(
            name=name,
            max_delivery_attempts=data.get("max_delivery_attempts"),
            fifo=data.get("fifo"),
        )
        return Response(ConsumerGroupOutSerializer(group).data)

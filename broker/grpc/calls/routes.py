"""Routes and clients: QueryRoute, QueryAssignment, Heartbeat, NotifyClientTermination (the
RocketMQ proxy's ``RouteActivity`` and ``ClientActivity``)."""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.constants import BROKER_NAME
from broker.errors import not_found
from broker.grpc.auth import CallMetadata
from broker.grpc.calls.base import CallsBase, answered, consumer_check, route_topic
from broker.grpc.convert import OK, client_kind, error_status
from broker.lookups import consumer_group_by_name
from broker.models import Topic
from broker.rules.message_types import TopicMessageType
from broker.rules.message_types import accepted_types as rule_accepted_types
from broker.services.access.callers import Caller
from broker.services.topology import clients

_PROTO_TYPES = {
    TopicMessageType.NORMAL: pb.MessageType.NORMAL,
    TopicMessageType.FIFO: pb.MessageType.FIFO,
    TopicMessageType.DELAY: pb.MessageType.DELAY,
    TopicMessageType.TRANSACTION: pb.MessageType.TRANSACTION,
}


def accepted_types(topic: Topic) -> list[int]:
    """The ``MessageType`` values a queue of ``topic`` accepts (its ``accept_message_types``):
    the topic's ``message_type``, or NORMAL, FIFO, DELAY and TRANSACTION for MIXED
    (``broker.rules.message_types.accepted_types``; RocketMQ proxy
    ``RouteActivity.parseTopicMessageType``). The official clients check them before sending
    (``publishing.validate_message_type``), so a client refuses a type the topic does not take
    without a SendMessage."""
    return [_PROTO_TYPES[t] for t in rule_accepted_types(topic.message_type)]


class RouteCalls(CallsBase):
    """QueryRoute, QueryAssignment, Heartbeat, NotifyClientTermination."""

    def _queues(
        self, topic: Topic, permission: int = pb.Permission.READ_WRITE
    ) -> list[pb.MessageQueue]:
        """One ``MessageQueue`` per queue of ``topic`` (ids from 0), on this server's endpoint."""
        broker = pb.Broker(name=BROKER_NAME, id=0, endpoints=self.endpoints)
        types = accepted_types(topic)
        return [
            pb.MessageQueue(
                topic=pb.Resource(name=topic.name),
                id=queue_id,
                permission=permission,
                broker=broker,
                accept_message_types=types,
            )
            for queue_id in range(topic.queue_nums)
        ]

    @answered(spb.QueryRouteResponse)
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        """The route of a topic: every queue of it on this server (RocketMQ proxy
        ``RouteActivity.queryRoute``). TOPIC_NOT_FOUND for an unknown topic, FORBIDDEN for a
        system topic."""
        topic = await self._call(
            context,
            lambda caller, m: route_topic(request.topic.name),
            request.topic.resource_namespace,
        )
        return spb.QueryRouteResponse(status=OK, message_queues=self._queues(topic))

    @answered(spb.QueryAssignmentResponse)
    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        """A PushConsumer's queues: every queue of the topic (Halfmoon's receive takes from all
        of them), READ (RocketMQ proxy ``RouteActivity.queryAssignment``)."""

        def work(caller: Caller, metadata: CallMetadata) -> Topic:
            consumer_check(caller, request.group.name)
            if consumer_group_by_name(request.group.name) is None:
                raise not_found("consumer_group", request.group.name)
            return route_topic(request.topic.name)

        topic = await self._call(
            context, work, request.topic.resource_namespace, request.group.resource_namespace
        )
        queues = self._queues(topic, pb.Permission.READ)
        return spb.QueryAssignmentResponse(
            status=OK, assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    @answered(spb.HeartbeatResponse)
    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> spb.HeartbeatResponse:
        """A client's heartbeat (every 10 s): its ``ClientConnection`` stays live."""

        def work(caller: Caller, metadata: CallMetadata) -> None:
            if not metadata.client_id:
                return
            clients.client_heartbeat(
                client_id=metadata.client_id,
                kind=client_kind(request.client_type),
                consumer_group=request.group.name,
                language=metadata.language,
                version=metadata.version,
                host=metadata.host,
                access_key=caller.name,
            )

        await self._call(context, work, request.group.resource_namespace)
        return spb.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        """A client shutting down: its row is disconnected. Always answered OK when the caller
        is authenticated (Node's ``shutdown()`` fails on a gRPC error), never a gRPC error."""

        def work(caller: Caller, metadata: CallMetadata) -> None:
            if metadata.client_id:
                clients.client_disconnect(client_id=metadata.client_id)

        try:
            await self._call(context, work)
        except Exception as exc:
            return spb.NotifyClientTerminationResponse(
                status=error_status(exc, call="NotifyClientTermination")
            )
        return spb.NotifyClientTerminationResponse(status=OK)

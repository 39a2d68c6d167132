"""api-v1 connection lists: the RocketMQ clients of a producer group or a consumer group seen
over gRPC (rocketmq-dashboard's producer and consumer connections)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import require_consumer, require_producer
from broker.api.serializers.clients import ClientConnectionsOutSerializer
from broker.api.views.base import error_responses
from broker.selectors.clients import (
    client_connections_of_consumer_group,
    client_connections_of_producer_group,
)

_SHOWN = (
    "Live clients (connected and heard from within HALFMOON_GRPC_CLIENT_EXPIRY_MS) first, then "
    "those disconnected or silent within the last hour (`live` false), most recently heard "
    "from first."
)


class ProducerGroupClientsView(APIView):
    @extend_schema(
        responses={200: ClientConnectionsOutSerializer, **error_responses(404)},
        summary="The gRPC clients of a producer group (addition to api-v1)",
        description=f"{_SHOWN} Readable by an admin key and the keys of the group.",
    )
    def get(self, request: Request, name: str) -> Response:
        require_producer(request, name)
        clients = client_connections_of_producer_group(name)
        return Response(ClientConnectionsOutSerializer({"clients": clients}).data)


class ConsumerGroupClientsView(APIView):
    @extend_schema(
        responses={200: ClientConnectionsOutSerializer, **error_responses(404)},
        summary="The gRPC clients of a consumer group (addition to api-v1)",
        description=f"{_SHOWN} Readable by an admin key and the keys of the group.",
    )
    def get(self, request: Request, name: str) -> Response:
        require_consumer(request, name)
        clients = client_connections_of_consumer_group(name)
        return Response(ClientConnectionsOutSerializer({"clients": clients}).data)

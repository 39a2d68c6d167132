"""api-v1 addition: a consumer group's subscriptions (RocketMQ's ``SubscriptionData`` per topic:
the filter its consumers receive with)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import require_consumer
from broker.api.serializers.subscriptions import SubscriptionsOutSerializer
from broker.api.views.base import error_responses
from broker.selectors.subscriptions import subscription_list
from broker.selectors.topology import consumer_group_get


class ConsumerGroupSubscriptionsView(APIView):
    @extend_schema(
        responses={200: SubscriptionsOutSerializer, **error_responses(404)},
        summary="A consumer group's subscriptions: each topic's filter (addition to api-v1)",
        description="The filter (TAG or SQL92) the group's consumers last received each topic "
        "with (an HTTP receive's `filter`, a gRPC client's subscription), by topic. Readable "
        "by an admin key and the keys of the group.",
    )
    def get(self, request: Request, name: str) -> Response:
        require_consumer(request, name)
        consumer_group_get(name)
        rows = subscription_list(consumer_group=name)
        return Response(
            SubscriptionsOutSerializer({"consumer_group": name, "subscriptions": rows}).data
        )

"""api-v1 addition: the broker settings in effect (admin key), so an operator's tool (``manage.py
demo``) waits on the running broker's settings rather than on its own environment's."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsAdminKey
from broker.api.serializers.broker_settings import BrokerSettingsOutSerializer
from broker.api.views.base import error_responses
from broker.selectors.broker_settings import broker_settings_effective


class BrokerSettingsView(APIView):
    """``GET /api/v1/broker-settings``: ``broker_settings_effective()``."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: BrokerSettingsOutSerializer, **error_responses()},
        summary="The broker settings in effect (admin key; addition to api-v1)",
        description="Every `HALFMOON_*` broker setting (the README's table) with the value the "
        "answering web process runs with, its `unit`, `default`, bounds and `source` "
        "(`default` or `setting`), then values derived from them (`derived`: the "
        "reconciliation's settle time, the beat periods). Broker settings are integers: no "
        "secret is among them. Admin key.",
    )
    def get(self, request: Request) -> Response:
        return Response(BrokerSettingsOutSerializer(broker_settings_effective()).data)

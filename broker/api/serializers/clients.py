"""Serializers of the RocketMQ clients seen over gRPC (``broker.models.ClientConnection``)."""

from __future__ import annotations

from rest_framework import serializers

from broker.models import ClientConnection


class ClientConnectionOutSerializer(serializers.ModelSerializer):
    """One client, as rocketmq-dashboard's connection list shows it: ``client_id`` (its
    ``x-mq-client-id``), ``language`` and ``version`` (its ``x-mq-language`` and
    ``x-mq-client-version``), ``kind`` (PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, OTHER), ``host``
    (peer address), ``access_key`` (the key's name, "" anonymous), ``producer_groups``,
    ``consumer_group`` ("" for a producer), ``topics`` (published or subscribed), the times in
    ms (``disconnected_timestamp`` null while connected) and ``live`` (connected and heard from
    within ``HALFMOON_GRPC_CLIENT_EXPIRY_MS``)."""

    producer_groups = serializers.ListField(child=serializers.CharField())
    topics = serializers.ListField(child=serializers.CharField())
    live = serializers.BooleanField()

    class Meta:
        model = ClientConnection
        fields = [
            "client_id",
            "language",
            "version",
            "kind",
            "host",
            "access_key",
            "producer_groups",
            "consumer_group",
            "topics",
            "connected_timestamp",
            "last_heartbeat_timestamp",
            "disconnected_timestamp",
            "live",
        ]


class ClientConnectionsOutSerializer(serializers.Serializer):
    """``GET /api/v1/producer-groups/{name}/clients`` and
    ``GET /api/v1/consumer-groups/{name}/clients``: the group's clients, live first."""

    clients = ClientConnectionOutSerializer(many=True)

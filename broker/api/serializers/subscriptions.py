"""Serializers of consumer groups' subscriptions (``broker.models.Subscription``)."""

from __future__ import annotations

from rest_framework import serializers

from broker.models import Subscription


class SubscriptionSerializer(serializers.ModelSerializer):
    """One subscription: the filter the group's consumers last received the topic with."""

    class Meta:
        model = Subscription
        fields = ["topic", "expression_type", "expression", "updated_timestamp"]


class SubscriptionsOutSerializer(serializers.Serializer):
    consumer_group = serializers.CharField()
    subscriptions = SubscriptionSerializer(many=True)

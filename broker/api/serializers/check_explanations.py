"""``GET /api/v1/transactions/{id}/check-explanation`` and
``GET /api/v1/producer-groups/{name}/check-explanation``: why the next back-check happens when
it does (``broker.selectors.check_explanations``, ``broker.rules.check_explanation``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.rules.check_explanation import REASONS, WARNINGS, CheckExplanation


class CodeTextSerializer(serializers.Serializer):
    """A reason or warning: its ``code`` and an English sentence."""

    code = serializers.CharField()
    text = serializers.CharField()


class SourcedValueSerializer(serializers.Serializer):
    """An effective value (ms unless its name says ``_hours``, or a count) and its ``source``:
    ``default``, ``setting`` (set in the broker's environment) or ``message property``
    (the half message's CHECK_IMMUNITY_TIME_IN_SECONDS)."""

    name = serializers.CharField()
    value = serializers.IntegerField()
    source = serializers.ChoiceField(choices=["default", "setting", "message property"])


class CheckExplanationSerializer(serializers.Serializer):
    """The prediction: ``predicted_check_timestamp`` (ms since the epoch; null: no check),
    ``outcome`` at that time (``check``, ``discard_check_max``, ``discard_file_reserved``,
    ``none``), what it waits for (``reasons``, the deciding one first), ``warnings``, the
    group's ``down_since`` (ms, null: its checks get through) and the ``values`` in effect."""

    now = serializers.IntegerField()
    predicted_check_timestamp = serializers.IntegerField(allow_null=True)
    outcome = serializers.ChoiceField(
        choices=["check", "discard_check_max", "discard_file_reserved", "none"]
    )
    reasons = CodeTextSerializer(many=True)
    warnings = CodeTextSerializer(many=True)
    down_since = serializers.IntegerField(allow_null=True)
    values = SourcedValueSerializer(many=True)


class TransactionCheckExplanationOutSerializer(CheckExplanationSerializer):
    """``GET /api/v1/transactions/{id}/check-explanation``."""

    transaction_id = serializers.CharField()
    producer_group = serializers.CharField()
    state = serializers.CharField()


class ProducerGroupCheckExplanationOutSerializer(CheckExplanationSerializer):
    """``GET /api/v1/producer-groups/{name}/check-explanation``: the explanation of the group's
    pending transaction due first (``next_transaction_id``, null when ``pending`` is 0)."""

    producer_group = serializers.CharField()
    pending = serializers.IntegerField()
    next_transaction_id = serializers.CharField(allow_null=True)


def explanation_data(e: CheckExplanation, *, now: int) -> dict[str, Any]:
    """The serializers' fields of ``e``, read at ``now`` (ms)."""
    return {
        "now": now,
        "predicted_check_timestamp": e.predicted_timestamp,
        "outcome": e.outcome,
        "reasons": [{"code": c, "text": REASONS[c]} for c in e.reasons],
        "warnings": [{"code": c, "text": WARNINGS[c]} for c in e.warnings],
        "down_since": e.down_since,
        "values": [
            {"name": name, "value": v.value, "source": v.source} for name, v in e.values.items()
        ],
    }

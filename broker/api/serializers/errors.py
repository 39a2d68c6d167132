"""The contract's error body, for the OpenAPI schema."""

from __future__ import annotations

from rest_framework import serializers


class ErrorDetailOutSerializer(serializers.Serializer):
    """The contract's error object: ``code`` (snake_case), ``message`` (one human sentence),
    ``details`` (per code; ``fields`` for ``invalid_input``)."""

    code = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    details = serializers.DictField()


class ErrorOutSerializer(serializers.Serializer):
    """Every error answer of api-v1: ``{"error": {"code", "message", "details"}}``
    (``broker.api.exceptions.error_body``)."""

    error = ErrorDetailOutSerializer()

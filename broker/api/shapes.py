"""One serializer instance per class for the API's inputs and outputs.

DRF builds a serializer's fields for every new instance (a deep copy of each declared field),
which costs more than the validation itself on the busiest endpoints (a send, an end, each item
of a batch). Validation and representation use no per-instance state, so each process keeps one
instance per serializer class and validates or represents with it, in whatever thread.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.serializers import BaseSerializer
from rest_framework.settings import api_settings

from broker.api.fast_validation import validation_plan

_INSTANCES: dict[type[BaseSerializer], BaseSerializer] = {}


def _instance(serializer_class: type[BaseSerializer]) -> BaseSerializer:
    serializer = _INSTANCES.get(serializer_class)
    if serializer is None:
        serializer = _INSTANCES.setdefault(serializer_class, serializer_class())
    return serializer


def validated(serializer_class: type[BaseSerializer], data: Any) -> dict[str, Any]:
    """``serializer_class``'s validated data for ``data`` (a parsed JSON body or a QueryDict).

    A JSON object is first checked by the serializer's compiled plan
    (``broker.api.fast_validation``), which answers only for valid data; otherwise, and for
    every error, DRF validates it, so errors are always DRF's.

    Raises:
        ValidationError (400): the detail ``serializer_class(data=data).is_valid()`` gives
            (``Serializer.errors``: a dict by field, ``non_field_errors`` for the whole).
    """
    serializer = _instance(serializer_class)
    if type(data) is dict:
        plan = validation_plan(serializer)
        if plan is not None:
            value = plan(data)
            if value is not None:
                return value
    try:
        return dict(serializer.run_validation(data))
    except ValidationError as exc:
        raise ValidationError(serializer_errors(exc)) from None


def represented(serializer_class: type[BaseSerializer], instance: Any) -> Any:
    """``serializer_class(instance).data``, without building the serializer's fields again."""
    return _instance(serializer_class).to_representation(instance)


def serializer_errors(exc: ValidationError) -> Any:
    """``exc.detail`` shaped as ``Serializer.errors`` (a non-dict input's error is keyed by
    ``non_field_errors``, as ``is_valid`` keys it)."""
    detail = exc.detail
    if isinstance(detail, dict):
        return detail
    return {api_settings.NON_FIELD_ERRORS_KEY: detail if isinstance(detail, list) else [detail]}

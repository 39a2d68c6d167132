"""What the API's views share: the error responses their OpenAPI descriptions list, and the
admin-only list-and-create view of the configuration resources."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from broker.api import schema as _schema  # noqa: F401 - registers the OpenAPI corrections
from broker.api.permissions import (
    IsAdminKey,
)
from broker.api.serializers.errors import ErrorOutSerializer
from broker.api.shapes import validated


def _error(description: str) -> OpenApiResponse:
    """An error answer of the OpenAPI document: the contract's error body (``ErrorOut``)."""
    return OpenApiResponse(ErrorOutSerializer, description=f"{description} (error body)")


ERRORS = {
    400: _error("invalid input"),
    401: _error("missing or bad access key"),
    403: _error("not allowed for this access key"),
    406: _error("the Accept header excludes application/json, the only type answered"),
    503: _error("the database is unreachable; try again after Retry-After seconds"),
}

_EXTRA_ERRORS = {
    404: _error("unknown resource"),
    409: _error("conflict with the current state"),
    413: _error("body or properties too large"),
}


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """The errors every operation may answer (``ERRORS``: 400, 401, 403, 406, 503) plus ``codes``
    (404, 409, 413), each with the contract's error body. An operation that reads a JSON body
    lists 413: every body passes the parser's size limit (``LimitedJSONParser``)."""
    return {**ERRORS, **{c: _EXTRA_ERRORS[c] for c in codes}}


class AdminListCreateView(APIView):
    """An admin-only configuration resource (topics, producer groups, consumer groups).

    GET lists ``rows()`` through ``out_serializer``; POST validates ``in_serializer``, calls
    the one service ``create(**validated_data)`` and answers 201 with ``created_serializer``
    (``out_serializer`` if None). A subclass names these (``rows`` a selector and ``create`` a
    service, as ``staticmethod``) and the two summaries; its OpenAPI operations are built from
    them, the create's errors with ``create_errors`` (besides 400, 401, 403 and 503), its
    description ``create_description``.
    """

    permission_classes = [IsAdminKey]
    in_serializer: type[Serializer]
    out_serializer: type[Serializer]
    created_serializer: type[Serializer] | None = None
    create_errors: tuple[int, ...] = (409, 413)
    list_summary: str
    create_summary: str
    create_description: str | None = None
    rows: Callable[[], Any]
    create: Callable[..., Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        extend_schema_view(
            get=extend_schema(
                responses={200: cls.out_serializer(many=True), **ERRORS}, summary=cls.list_summary
            ),
            post=extend_schema(
                request=cls.in_serializer,
                responses={
                    201: cls.created_serializer or cls.out_serializer,
                    **error_responses(*cls.create_errors),
                },
                summary=cls.create_summary,
                description=cls.create_description,
            ),
        )(cls)

    def get(self, request: Request) -> Response:
        return Response(self.out_serializer(self.rows(), many=True).data)

    def post(self, request: Request) -> Response:
        created = self.create(**validated(self.in_serializer, request.data))
        out = self.created_serializer or self.out_serializer
        return Response(out(created).data, status=status.HTTP_201_CREATED)

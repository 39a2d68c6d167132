"""One place that turns every error into the contract's body:
``{"error": {"code": "snake_case_code", "message": "one human sentence", "details": {...}}}``.

Errors that are the server's side (api-v1 "Conventions"):

- the database unreachable (``OperationalError`` / ``InterfaceError``: connection refused, the
  pool's timeout, a connection lost mid-request): 503 ``service_unavailable`` with
  ``Retry-After``, whether raised in a DRF view or anywhere else in the request (``handler500``);
- anything else unexpected: 500 ``internal_error``.

Both carry ``details.request_id`` and the ``X-Request-ID`` header (``broker.plumbing.request_id``),
the id the log line of the error names: Django's ``django.request`` record (with the traceback)
and, for a 503, this module's ``halfmoon.api`` warning.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from broker.errors import HalfmoonError
from broker.plumbing.database_status import (
    DATABASE_UNAVAILABLE_ERRORS,
    DATABASE_UNAVAILABLE_RESPONSES,
)
from broker.plumbing.request_id import REQUEST_ID_HEADER, request_id

logger = logging.getLogger("halfmoon.api")

# Retry-After of the 503 answered while the database is unreachable, in seconds.
DATABASE_RETRY_AFTER_S = 5

_DRF_CODES: dict[type[exceptions.APIException], tuple[str, str]] = {
    exceptions.ParseError: ("malformed_request", "The request body is not valid JSON."),
    exceptions.NotAuthenticated: (
        "not_authenticated",
        "An access key is required: 'Authorization: Bearer <token>'.",
    ),
    exceptions.AuthenticationFailed: ("authentication_failed", ""),
    exceptions.PermissionDenied: ("permission_denied", ""),
    exceptions.NotFound: ("not_found", "No such resource."),
    exceptions.MethodNotAllowed: ("method_not_allowed", ""),
    exceptions.NotAcceptable: ("not_acceptable", "Only application/json responses are available."),
    exceptions.UnsupportedMediaType: (
        "unsupported_media_type",
        "Send the body as application/json.",
    ),
    exceptions.Throttled: ("throttled", ""),
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract's error body."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _plain(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {str(k): _plain(v) for k, v in detail.items()}
    if isinstance(detail, list):
        return [_plain(v) for v in detail]
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: HalfmoonError and DRF/Django errors -> the contract's body,
    always rendered as JSON, even by views whose renderers are YAML or HTML (the schema and
    docs views), so no error is ever answered as a YAML document or an HTML page."""
    response = _error_response(exc, context)
    request = context.get("request")
    if response is not None and request is not None:
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type
    return response


def _error_response(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS) and context.get("request") is not None:
        body, headers = database_unavailable(context["request"], exc)
        return Response(body, status=503, headers=headers)
    if isinstance(exc, HalfmoonError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("request_too_large", "The request body is larger than the broker accepts."),
            status=413,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
    if isinstance(exc, exceptions.ValidationError):
        details = _plain(exc.detail)
        if not isinstance(details, dict):
            details = {"non_field_errors": details}
        fields = ", ".join(sorted(details))
        body = error_body(
            "invalid_input", f"The request is invalid: check {fields}.", {"fields": details}
        )
        return Response(body, status=400, headers=headers)
    code, message = next(
        (v for cls, v in _DRF_CODES.items() if isinstance(exc, cls)), ("error", "")
    )
    return Response(
        error_body(code, message or str(exc.detail)), status=exc.status_code, headers=headers
    )


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """handler404: JSON, never an HTML page."""
    return JsonResponse(error_body("not_found", f"No resource at {request.path}."), status=404)


def database_unavailable(request: Any, exc: BaseException) -> tuple[dict[str, Any], dict[str, str]]:
    """The 503 answered while the database is unreachable: its body (code
    ``service_unavailable``, ``details.request_id``) and headers (``Retry-After`` in seconds,
    ``X-Request-ID``). Logs one ``halfmoon.api`` warning naming the request id and the error,
    and counts the answer in ``halfmoon_database_unavailable_responses_total``
    (``broker.plumbing.database_status``); the console's HTML 503 (``halfmoon.errors``) comes
    through here too.

    Args:
        request: the Django or DRF request.
        exc: the ``OperationalError`` / ``InterfaceError`` raised.
    """
    rid = request_id(request)
    DATABASE_UNAVAILABLE_RESPONSES.inc()
    logger.warning(
        "Database unavailable on %s %s: %s: %s (request_id=%s)",
        request.method,
        request.path,
        type(exc).__name__,
        str(exc).strip() or "-",
        rid,
    )
    body = error_body(
        "service_unavailable",
        f"The broker's database is unreachable: retry in {DATABASE_RETRY_AFTER_S} s.",
        {"request_id": rid},
    )
    return body, {"Retry-After": str(DATABASE_RETRY_AFTER_S), REQUEST_ID_HEADER: rid}


def server_error_view(request: HttpRequest) -> JsonResponse:
    """handler500 of the API's paths: JSON, never an HTML page.

    Django calls it while it handles the exception, so ``sys.exc_info()`` is the error: an
    unreachable database answers the 503 of ``database_unavailable``, anything else 500
    ``internal_error``. Both carry ``details.request_id`` and ``X-Request-ID``; Django then
    logs the error with its traceback on ``django.request``, the record naming the same id
    (``broker.plumbing.request_id.RequestIdFilter`` in ``LOGGING``).
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS):
        body, headers = database_unavailable(request, exc)
        return JsonResponse(body, status=503, headers=headers)
    rid = request_id(request)
    return JsonResponse(internal_error_body(rid), status=500, headers={REQUEST_ID_HEADER: rid})


def internal_error_body(rid: str) -> dict[str, Any]:
    """The contract's body of an unexpected error (500 ``internal_error``), naming the request
    id ``rid`` its logged traceback carries (``broker.plumbing.request_id``)."""
    return error_body(
        "internal_error",
        "The broker failed to handle this request; it has been logged with its request id.",
        {"request_id": rid},
    )


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """handler400 (e.g. a disallowed Host header)."""
    return JsonResponse(
        error_body("bad_request", "The request could not be understood."), status=400
    )


def permission_denied_view(
    request: HttpRequest, exception: Exception | None = None
) -> JsonResponse:
    """handler403."""
    return JsonResponse(error_body("permission_denied", "Not allowed."), status=403)

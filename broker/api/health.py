"""Operations endpoints that need no token: /healthz and /metrics."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.api.exceptions import error_body
from broker.metrics import REGISTRY

View = Callable[[HttpRequest], HttpResponse]


def get_only(view: View) -> View:
    """GET only; any other method answers 405 with the contract's error body (Django's own
    require_GET answers an empty text/html 405, and CSRF would refuse a POST with an HTML page)."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request: HttpRequest) -> HttpResponse:
        if request.method != "GET":
            body = error_body("method_not_allowed", f'Method "{request.method}" not allowed.')
            response = JsonResponse(body, status=405)
            response["Allow"] = "GET"
            return response
        return view(request)

    return wrapped


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return f"error: {type(exc).__name__}"


def _redis_ok() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        try:
            client.ping()
        finally:
            client.close()
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"error: {type(exc).__name__}"


@get_only
def healthz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ok", "database": "ok", "redis": "ok"}`` when both answer; else 503 with
    ``status: "unavailable"`` and the contract's error body beside it."""
    database, cache = _database_ok(), _redis_ok()
    if database == "ok" and cache == "ok":
        return JsonResponse({"status": "ok", "database": database, "redis": cache})
    return JsonResponse(
        {
            "status": "unavailable",
            "database": database,
            "redis": cache,
            "error": {
                "code": "unavailable",
                "message": "The database or Redis does not answer.",
                "details": {"database": database, "redis": cache},
            },
        },
        status=503,
    )


@get_only
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; 200 while the database is away too, without the families read
    from it and with ``halfmoon_database_up`` 0 (``broker.metrics``)."""
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

"""Operations endpoints that need no token: /healthz and /metrics."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.metrics import REGISTRY


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return f"error: {type(exc).__name__}"


def _redis_ok() -> str:
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
        try:
            client.ping()
        finally:
            client.close()
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"error: {type(exc).__name__}"


@require_GET
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


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format."""
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

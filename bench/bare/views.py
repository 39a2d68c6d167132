"""The baseline's two requests per transaction: insert a 1 KB row, then commit it (in one
database transaction: ``SELECT ... FOR UPDATE``, then ``UPDATE``). Plain Django views, the ORM,
no DRF, no authentication: what Django itself costs for the same two writes."""

from __future__ import annotations

import json
import time

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from bare.models import Row


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _error(status: int, code: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": code, "details": {}}}, status=status)


@require_POST
def insert(request: HttpRequest) -> JsonResponse:
    """``POST /bare/insert`` ``{"msg_id", "body"}``: store the row PREPARED; 201."""
    try:
        data = json.loads(request.body)
        msg_id, body = str(data["msg_id"]), str(data["body"]).encode()
    except (ValueError, KeyError, TypeError):
        return _error(400, "invalid_input")
    try:
        row = Row.objects.create(msg_id=msg_id, body=body, state="PREPARED", created_ms=_now_ms())
    except IntegrityError:
        return _error(409, "duplicate_msg_id")
    return JsonResponse({"id": row.pk, "msg_id": row.msg_id, "state": row.state}, status=201)


@require_POST
def commit(request: HttpRequest, msg_id: str) -> JsonResponse:
    """``POST /bare/<msg_id>/commit``: lock the row, mark it COMMITTED; 200."""
    try:
        json.loads(request.body or b"{}")
    except ValueError:
        return _error(400, "invalid_input")
    with transaction.atomic():
        row = Row.objects.select_for_update().filter(msg_id=msg_id).first()
        if row is None:
            return _error(404, "not_found")
        if row.state != "COMMITTED":
            row.state = "COMMITTED"
            row.resolved_ms = _now_ms()
            row.save(update_fields=["state", "resolved_ms"])
    return JsonResponse({"id": row.pk, "msg_id": row.msg_id, "state": row.state})

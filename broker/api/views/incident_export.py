"""api-v1 addition: the incident export (``POST /api/v1/incident-exports``), the console's
``/console/export/`` for programs: a zip of the transactions of a selection or a filter, their
timelines, audit entries and the latest reconciliation's anomalies
(``broker.services.operations.incident_export``). An admin key exports any transaction; a key with
producer groups, or operating some, those of its groups."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import operator_actor, require_transaction_reader
from broker.api.schema import RequiredBodySchema
from broker.api.serializers.incident_export import IncidentExportInSerializer
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.rules.clock import now_ms
from broker.selectors.incident import IncidentScope
from broker.services.operations.incident_export import (
    incident_export_file,
    incident_export_filename,
)


class ZipRenderer(BaseRenderer):
    """Lets ``Accept: application/zip`` through content negotiation; the export's answer is a
    ``FileResponse`` that no renderer touches, and errors are rendered as JSON."""

    media_type = "application/zip"
    format = "zip"
    charset = None
    render_style = "binary"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context=None):
        return data


def _scope(request: Request, data: dict[str, Any]) -> IncidentScope:
    user = request.user
    groups = None
    if not user.is_admin:
        groups = frozenset(user.producer_groups) | frozenset(
            user.operator_scope.producer_groups or ()
        )
    if "transaction_ids" in data:
        ids = tuple(dict.fromkeys(data["transaction_ids"]))
        return IncidentScope(kind="selection", transaction_ids=ids, producer_groups=groups)
    if "stuck" in data:
        filters = {**data["stuck"], "now": now_ms()}
        return IncidentScope(kind="stuck", filters=filters, producer_groups=groups)
    if "messages" in data:
        return IncidentScope(
            kind="messages", filters=dict(data["messages"]), producer_groups=groups
        )
    return IncidentScope(kind="audit", filters=dict(data["audit"]), producer_groups=groups)


class IncidentExportView(APIView):
    renderer_classes = [JSONRenderer, ZipRenderer]
    schema = RequiredBodySchema()

    @extend_schema(
        request=IncidentExportInSerializer,
        responses={
            (200, "application/zip"): OpenApiResponse(
                description="The export: README.txt, filter.json, and transactions, timeline, "
                "audit and anomalies, each as .json and .csv"
            ),
            **error_responses(404, 413),
        },
        summary="Export an incident: transactions, timelines, audit entries and anomalies as a "
        "zip (addition to api-v1)",
        description=(
            "Exactly one of `transaction_ids` (a selection), `stuck` (the stuck list's filter), "
            "`messages` (the message search: the transactions of the messages found) and "
            "`audit` (the audit log's filter: the transactions its entries acted on). At most "
            "1000 transactions: 400 `export_too_large` above (narrow the filter), "
            "`export_empty` when none matches. An admin key exports any transaction, a key "
            "with producer groups (or operating some) those of its groups; any other key: 403. "
            "`?format=zip` stands for `Accept: application/zip`; another format is 404."
        ),
    )
    def post(self, request: Request) -> FileResponse:
        require_transaction_reader(request)
        data = validated(IncidentExportInSerializer, request.data)
        scope = _scope(request, data)
        out, _ = incident_export_file(scope=scope, actor=operator_actor(request))
        name = incident_export_filename(scope, now_ms())
        return FileResponse(out, as_attachment=True, filename=name, content_type="application/zip")

    def handle_exception(self, exc: Exception) -> Response:
        """Errors in the contract's JSON error body, whatever the request accepted."""
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)

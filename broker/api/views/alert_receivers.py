"""api-v1 additions for Halfmoon's own alerts (``docs/api.md``): the alert receivers and the
silences, admin key only, what the console offers on them and no more.

- ``GET``/``POST /api/v1/alert-receivers``, ``GET``/``PATCH``/``DELETE
  /api/v1/alert-receivers/{name}``: every write through ``broker.services.alerts.receivers``;
  a new receiver's signing secret is answered by its create only.
- ``GET``/``POST /api/v1/alert-silences``, ``GET /api/v1/alert-silences/{silence_id}`` and
  ``POST /api/v1/alert-silences/{silence_id}/expire`` (ends the silence now, with a reason in
  the body as every audited action of the API; the silence stays in the history): through
  ``broker.services.alerts.silences``, audited as the console's (actor ``operator:<key
  name>``, via ``api``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsAdminKey, operator_actor
from broker.api.serializers.alert_receivers import (
    AlertReceiverCreatedSerializer,
    AlertReceiverInSerializer,
    AlertReceiverOutSerializer,
    AlertReceiverPatchSerializer,
    AlertSilenceExpireInputSerializer,
    AlertSilenceExpireInSerializer,
    AlertSilenceInputSerializer,
    AlertSilenceInSerializer,
    AlertSilenceOutSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import AdminListCreateView, error_responses
from broker.models import AuditEntry
from broker.rules.clock import now_ms
from broker.selectors.alerts import (
    active_silences,
    alert_receiver_get,
    alert_receiver_list,
    alert_silence_get,
)
from broker.services.alerts import receivers, silences


class AlertReceiverListCreateView(AdminListCreateView):
    """Alert receivers: where notifications go (addition to api-v1)."""

    in_serializer = AlertReceiverInSerializer
    out_serializer = AlertReceiverOutSerializer
    created_serializer = AlertReceiverCreatedSerializer
    create_errors = (409, 413)
    list_summary = "List alert receivers, without their secrets (admin key; addition to api-v1)"
    create_summary = (
        "Create an alert receiver (admin key; addition to api-v1): the answer carries its "
        "signing secret, this once only; 409 alert_receiver_exists"
    )
    create_description = (
        "`kind` `alertmanager` or `slack` needs a `url` (400 `url_required`), `email` 1 to 50 "
        "addresses in `emails` (400 `emails_required`, `invalid_email`); the other kind's "
        "target field is not read (the schema's `oneOf`). A webhook `url` must be http(s) and "
        "reach an address HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS allows, a deployment "
        "setting no schema states: 400 `webhook_url_not_allowed` (`details.rule`) otherwise."
    )
    rows = staticmethod(alert_receiver_list)
    create = staticmethod(receivers.receiver_create)


class AlertReceiverDetailView(APIView):
    """One alert receiver: read, change, delete (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: AlertReceiverOutSerializer, **error_responses(404)},
        summary="An alert receiver, without its secret (admin key; addition to api-v1)",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(AlertReceiverOutSerializer(alert_receiver_get(name)).data)

    @extend_schema(
        request=AlertReceiverPatchSerializer,
        responses={200: AlertReceiverOutSerializer, **error_responses(404, 413)},
        summary="Change an alert receiver (admin key; addition to api-v1)",
        description="Any of `url` (the webhook kinds), `emails` (`email`) and `enabled`; the "
        "name, kind and secret stay, and the target field of the other kinds is not read. "
        "400 `url_required`, `webhook_url_not_allowed`, `emails_required`, `invalid_email`; "
        "404 `alert_receiver_not_found`.",
    )
    def patch(self, request: Request, name: str) -> Response:
        changes = validated(AlertReceiverPatchSerializer, request.data)
        receiver = receivers.receiver_update(name=name, **changes)
        return Response(AlertReceiverOutSerializer(receiver).data)

    @extend_schema(
        responses={204: None, **error_responses(404)},
        summary="Delete an alert receiver (admin key; addition to api-v1)",
        description='Its pending notifications fail at once ("the receiver was deleted").',
    )
    def delete(self, request: Request, name: str) -> Response:
        receivers.receiver_delete(name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertSilenceListCreateView(APIView):
    """Silences: the ones in force, and a new one (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: AlertSilenceOutSerializer(many=True), **error_responses()},
        summary="List the silences in force, newest first (admin key; addition to api-v1)",
    )
    def get(self, request: Request) -> Response:
        return Response(AlertSilenceOutSerializer(active_silences(now_ms()), many=True).data)

    @extend_schema(
        request=AlertSilenceInSerializer,
        responses={201: AlertSilenceOutSerializer, **error_responses(404, 409, 413)},
        summary="Silence an alert's rule on its group (admin key; addition to api-v1)",
        description="No notifications of the rule of alert `alert_id` on that alert's group "
        "for `duration_s` seconds from now; in the audit log (action `silence-alert`, actor "
        "`operator:<key name>`, via `api`). 400 `reason_required`, `reason_too_long`; 404 "
        "`alert_not_found`; 409 `alert_rule_deleted`.",
    )
    def post(self, request: Request) -> Response:
        data = validated(AlertSilenceInputSerializer, request.data)
        silence = silences.alert_silence(
            alert_id=data["alert_id"],
            duration_s=data["duration_s"],
            reason=data["reason"] or "",
            actor=operator_actor(request),
            via=AuditEntry.Via.API,
        )
        return Response(AlertSilenceOutSerializer(silence).data, status=status.HTTP_201_CREATED)


class AlertSilenceDetailView(APIView):
    """One silence, in force or over (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: AlertSilenceOutSerializer, **error_responses(404)},
        summary="A silence, in force or over (admin key; addition to api-v1)",
    )
    def get(self, request: Request, silence_id: int) -> Response:
        return Response(AlertSilenceOutSerializer(alert_silence_get(silence_id)).data)


class AlertSilenceExpireView(APIView):
    """End a silence now, with a reason (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        request=AlertSilenceExpireInSerializer,
        responses={200: AlertSilenceOutSerializer, **error_responses(404, 409, 413)},
        summary="End a silence now (admin key; addition to api-v1)",
        description="The silence stays in the history, ended now (`active` false, "
        "`expired_by` the key), and the next evaluation notifies what it held back and still "
        "fires. In the audit log (action `expire-silence`). 400 `reason_required` (missing, "
        "null or blank); 404 `alert_silence_not_found`; 409 `silence_over`.",
    )
    def post(self, request: Request, silence_id: int) -> Response:
        data = validated(AlertSilenceExpireInputSerializer, request.data or {})
        silence = silences.alert_silence_expire(
            silence_id=silence_id,
            reason=data["reason"] or "",
            actor=operator_actor(request),
            via=AuditEntry.Via.API,
        )
        return Response(AlertSilenceOutSerializer(silence).data)

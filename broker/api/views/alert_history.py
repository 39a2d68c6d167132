"""api-v1 additions for Halfmoon's own alerts (``docs/api.md``): what fired and what was
notified, admin key only, as the console's alerts page shows it.

- ``GET /api/v1/alerts`` (``state`` firing, the default, or resolved) and ``GET
  /api/v1/alerts/{alert_id}`` (with its notifications): ``broker.selectors.alerts``.
- ``GET /api/v1/alert-notifications`` (the latest, by ``state``) and ``POST
  /api/v1/alert-notifications/{notification_id}/retry`` (a failed one is pending again):
  ``broker.services.alerts.notifications.notification_retry``, as the console's retry.
Silencing an alert is ``POST /api/v1/alert-silences``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsAdminKey
from broker.api.serializers.alert_history import (
    AlertDetailOutSerializer,
    AlertNotificationOutSerializer,
    AlertNotificationQuerySerializer,
    AlertOutSerializer,
    AlertQuerySerializer,
    silences_by_alert,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.models import Alert
from broker.rules.clock import now_ms
from broker.selectors.alerts import (
    alert_get,
    alert_notifications,
    firing_alerts,
    notifications_by_state,
    recent_alerts,
)
from broker.services.alerts.notifications import notification_retry


class AlertListView(APIView):
    """The alerts firing now, or the latest resolved ones (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        parameters=[AlertQuerySerializer],
        responses={200: AlertOutSerializer(many=True), **error_responses()},
        summary="List alerts: firing (critical first, then the oldest) or the latest resolved "
        "(admin key; addition to api-v1)",
    )
    def get(self, request: Request) -> Response:
        query = validated(AlertQuerySerializer, request.query_params)
        if query["state"] == Alert.State.FIRING:
            rows = firing_alerts(now_ms())
            context = {"silences": silences_by_alert(rows)}
            return Response(
                AlertOutSerializer([r.alert for r in rows], many=True, context=context).data
            )
        resolved = recent_alerts(query["limit"])
        return Response(AlertOutSerializer(resolved, many=True).data)


class AlertDetailView(APIView):
    """One alert and its notifications (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: AlertDetailOutSerializer, **error_responses(404)},
        summary="An alert with its notifications, oldest first (admin key; addition to api-v1)",
        description="404 `alert_not_found`.",
    )
    def get(self, request: Request, alert_id: int) -> Response:
        alert = alert_get(alert_id)
        context = {"notifications": alert_notifications(alert)}
        if alert.state == Alert.State.FIRING:
            context["silences"] = silences_by_alert(firing_alerts(now_ms()))
        return Response(AlertDetailOutSerializer(alert, context=context).data)


class AlertNotificationListView(APIView):
    """The latest notifications, of one state or all (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        parameters=[AlertNotificationQuerySerializer],
        responses={200: AlertNotificationOutSerializer(many=True), **error_responses()},
        summary="List the latest alert notifications, newest first (admin key; addition to api-v1)",
    )
    def get(self, request: Request) -> Response:
        query = validated(AlertNotificationQuerySerializer, request.query_params)
        rows = notifications_by_state(query.get("state"), limit=query["limit"])
        return Response(AlertNotificationOutSerializer(rows, many=True).data)


class AlertNotificationRetryView(APIView):
    """Send a failed notification again (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        request=None,
        responses={200: AlertNotificationOutSerializer, **error_responses(404, 409)},
        summary="Retry a failed alert notification (admin key; addition to api-v1)",
        description="The notification is pending again, due now, its attempts counted from 0; "
        "the next evaluation sends it. 404 `alert_notification_not_found`; 409 "
        "`notification_not_failed`.",
    )
    def post(self, request: Request, notification_id: int) -> Response:
        row = notification_retry(notification_id=notification_id)
        return Response(AlertNotificationOutSerializer(row).data)

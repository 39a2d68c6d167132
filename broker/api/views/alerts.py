"""api-v1 additions for Halfmoon's own alerts (``docs/api.md``): the alert rules,
admin key only. ``GET``/``POST /api/v1/alert-rules`` and ``GET``/``PATCH``/``DELETE
/api/v1/alert-rules/{name}``; every write goes through ``broker.services.alerts.rules``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsAdminKey
from broker.api.serializers.alerts import (
    AlertRuleInSerializer,
    AlertRuleOutSerializer,
    AlertRulePatchSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import AdminListCreateView, error_responses
from broker.selectors.alerts import alert_rule_get, alert_rule_list
from broker.services.alerts import rules


class AlertRuleListCreateView(AdminListCreateView):
    """Alert rules: what Halfmoon watches and when it notifies (addition to api-v1)."""

    in_serializer = AlertRuleInSerializer
    out_serializer = AlertRuleOutSerializer
    create_errors = (404, 409, 413)
    list_summary = "List alert rules (admin key; addition to api-v1)"
    create_summary = (
        "Create an alert rule (admin key; addition to api-v1): 404 for an unknown group, 409 "
        "alert_rule_exists"
    )
    rows = staticmethod(alert_rule_list)
    create = staticmethod(rules.alert_rule_create)


class AlertRuleDetailView(APIView):
    """One alert rule: read, change, delete (addition to api-v1)."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        responses={200: AlertRuleOutSerializer, **error_responses(404)},
        summary="An alert rule (admin key; addition to api-v1)",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(AlertRuleOutSerializer(alert_rule_get(name)).data)

    @extend_schema(
        request=AlertRulePatchSerializer,
        responses={200: AlertRuleOutSerializer, **error_responses(404, 413)},
        summary="Change an alert rule (admin key; addition to api-v1)",
        description="Any of `group`, `threshold`, `window_s`, `severity`, `repeat_interval_s`, "
        "`enabled`, `description`; the name and kind stay. An alert the change stops (a "
        "disabled rule, another group, a threshold no longer crossed) resolves at the next "
        "evaluation. 404 `alert_rule_not_found`, or the group's `<kind>_not_found`.",
    )
    def patch(self, request: Request, name: str) -> Response:
        changes = validated(AlertRulePatchSerializer, request.data)
        rule = rules.alert_rule_update(name=name, **changes)
        return Response(AlertRuleOutSerializer(rule).data)

    @extend_schema(
        responses={204: None, **error_responses(404)},
        summary="Delete an alert rule (admin key; addition to api-v1)",
        description="Its firing alerts resolve at once (notified as resolved where their "
        "firing was notified) and stay in the history; its silences go with it.",
    )
    def delete(self, request: Request, name: str) -> Response:
        rules.alert_rule_delete(name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)

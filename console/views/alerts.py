"""Console pages: Halfmoon's own alerts (``/console/alerts/``).

- Viewers and up: the firing alerts (with the silence covering each), the silences in force,
  the latest resolved alerts and the notifications (pending, failed with their error and
  attempts, the latest sent); an alert's page with each of its notifications; the rules.
- Operators: silence an alert's rule on its group for a time with a reason, end a silence
  early with a reason (both in the audit log), retry a failed notification.
- Admins: create, edit and delete rules and receivers (``broker.services.alerts``, the same
  services as the API and the Django admin); a new receiver's signing secret is shown once.

Every page carries the banner of the firing alerts (``console.context.alerts_banner``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views import View

from broker.errors import HalfmoonError, InvalidInput, NotFound
from broker.rules.alerts import KINDS, AlertKind
from broker.rules.clock import now_ms
from broker.selectors.alerts import (
    active_silences,
    alert_configuration_counts,
    alert_get,
    alert_notifications,
    alert_receiver_get,
    alert_receiver_list,
    alert_rule_get,
    alert_rule_list,
    firing_alerts,
    notifications_by_states,
    recent_alerts,
)
from broker.services.alerts import receivers, rules
from broker.services.alerts.notifications import notification_retry
from broker.services.alerts.silences import alert_silence, alert_silence_expire
from broker.services.operations.audit import VIA_CONSOLE
from console.forms.alerts import (
    AlertRuleCreateForm,
    AlertRuleEditForm,
    ReceiverCreateForm,
    ReceiverEditForm,
    SilenceForm,
)
from console.permissions import ManageConsoleRequired, OperateConsoleRequired, ViewConsoleRequired
from console.views.actions import console_actor
from console.views.base import ServiceFormView

SENT_SHOWN = 20


class AlertsView(ViewConsoleRequired, View):
    """GET ``/console/alerts/``: firing alerts, silences, recent alerts, notifications."""

    def get(self, request: HttpRequest) -> HttpResponse:
        now = now_ms()
        context = {
            "now": now,
            "firing": firing_alerts(now),
            "silences": active_silences(now),
            "recent": recent_alerts(),
            **notifications_by_states(sent_limit=SENT_SHOWN),
            **alert_configuration_counts(),
            "silence_form": SilenceForm(),
        }
        return render(request, "console/alerts/list.html", context)


class AlertDetailView(ViewConsoleRequired, View):
    """GET ``/console/alerts/<id>/``: one alert (firing or resolved) and its notifications,
    each with its state, attempts and last error (the link of every notification)."""

    def get(self, request: HttpRequest, alert_id: int) -> HttpResponse:
        try:
            alert = alert_get(alert_id)
        except NotFound as error:
            raise Http404(error.message) from error
        spec = KINDS[AlertKind(alert.kind)]
        context = {
            "alert": alert,
            "spec": spec,
            "notifications": alert_notifications(alert),
            "silence_form": SilenceForm(),
        }
        return render(request, "console/alerts/detail.html", context)


class AlertSilenceView(OperateConsoleRequired, View):
    """POST ``/console/alerts/<id>/silence/`` with ``duration_s`` and ``reason``: silence the
    alert's rule on its group (audited), then back to the alerts page."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, alert_id: int) -> HttpResponse:
        form = SilenceForm(request.POST)
        if not form.is_valid():
            messages.error(request, f"Silence refused: {_errors_text(form)}")
            return redirect("console:alerts")
        try:
            silence = alert_silence(
                alert_id=alert_id,
                duration_s=form.cleaned_data["duration_s"],
                reason=form.cleaned_data["reason"],
                actor=console_actor(request.user),
                via=VIA_CONSOLE,
            )
        except NotFound as error:
            raise Http404(error.message) from error
        except HalfmoonError as error:
            messages.error(request, f"Silence refused: {error.message}")
        else:
            messages.success(
                request,
                f"{silence.rule.name} on {silence.group} silenced: no notifications until it ends "
                "(in the audit log).",
            )
        return redirect("console:alerts")


class SilenceExpireView(OperateConsoleRequired, View):
    """POST ``/console/alerts/silences/<id>/expire/`` with ``reason``: end a silence now
    (audited)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, silence_id: int) -> HttpResponse:
        try:
            silence = alert_silence_expire(
                silence_id=silence_id,
                reason=request.POST.get("reason", ""),
                actor=console_actor(request.user),
                via=VIA_CONSOLE,
            )
        except NotFound as error:
            raise Http404(error.message) from error
        except HalfmoonError as error:
            messages.error(request, f"Not ended: {error.message}")
        else:
            messages.success(request, f"The silence of {silence.rule.name} has ended.")
        return redirect("console:alerts")


class NotificationRetryView(OperateConsoleRequired, View):
    """POST ``/console/alerts/notifications/<id>/retry/``: a failed notification is pending
    again, sent at the next evaluation."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, notification_id: int) -> HttpResponse:
        try:
            notification_retry(notification_id=notification_id)
        except NotFound as error:
            raise Http404(error.message) from error
        except HalfmoonError as error:
            messages.error(request, f"Not retried: {error.message}")
        else:
            messages.success(
                request, f"Notification {notification_id} will be sent at the next evaluation."
            )
        return redirect("console:alerts")


def _errors_text(form: Any) -> str:
    return "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())


# --- Rules and receivers (admins) -------------------------------------------------------------


class AlertRuleListView(ViewConsoleRequired, View):
    """GET ``/console/alerts/rules/``: every rule with its alerts firing now."""

    def get(self, request: HttpRequest) -> HttpResponse:
        context = {"rules": alert_rule_list(), "kinds": KINDS}
        return render(request, "console/alerts/rules.html", context)


def _rule(name: str | None) -> Any:
    """The alert rule ``name`` (an ``AlertRule``); 404 when there is none."""
    try:
        return alert_rule_get(name or "")
    except NotFound as exc:
        raise Http404(f"No alert rule {name}") from exc


def _receiver(name: str | None) -> Any:
    """The receiver ``name`` (an ``AlertReceiver``); 404 when there is none."""
    try:
        return alert_receiver_get(name or "")
    except NotFound as exc:
        raise Http404(f"No alert receiver {name}") from exc


def _group_checked(apply: Any) -> Any:
    """``apply`` (a rule's create or update) with an unknown group in the form reported on
    the form's ``group`` field (400), not as the page's 404."""
    try:
        return apply()
    except NotFound as error:
        if error.code not in (
            "producer_group_not_found",
            "consumer_group_not_found",
            "topic_not_found",
        ):
            raise
        raise InvalidInput(error.message, code=error.code, details={"field": "group"}) from error


class AlertRuleCreateView(ServiceFormView):
    """``/console/alerts/rules/new/`` (admin): ``alert_rule_create``."""

    form_class = AlertRuleCreateForm
    title = "New alert rule"
    noun = "Alert rule"
    list_route = "console:alert_rules"

    def initial(self, name: str | None) -> dict[str, Any]:
        return {"enabled": True, "severity": "warning"}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return _group_checked(lambda: rules.alert_rule_create(**data))


class AlertRuleEditView(ServiceFormView):
    """``/console/alerts/rules/<name>/edit/`` (admin): ``alert_rule_update``."""

    form_class = AlertRuleEditForm
    title = "Edit alert rule"
    noun = "Alert rule"
    list_route = "console:alert_rules"

    def initial(self, name: str | None) -> dict[str, Any]:
        rule = _rule(name)
        return {field: getattr(rule, field) for field in AlertRuleEditForm.base_fields}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return _group_checked(lambda: rules.alert_rule_update(name=name or "", **data))


class AlertRuleDeleteView(ManageConsoleRequired, View):
    """POST ``/console/alerts/rules/<name>/delete/`` (admin): ``alert_rule_delete`` (its firing
    alerts resolve at once)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        try:
            rules.alert_rule_delete(name=name)
        except NotFound as error:
            raise Http404(error.message) from error
        messages.success(request, f"Alert rule {name} deleted; its firing alerts resolved.")
        return redirect("console:alert_rules")


class ReceiverListView(ManageConsoleRequired, View):
    """GET ``/console/alerts/receivers/`` (admin: a webhook URL may carry a token)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(
            request, "console/alerts/receivers.html", {"receivers": alert_receiver_list()}
        )


class ReceiverCreateView(ServiceFormView):
    """``/console/alerts/receivers/new/`` (admin): ``receiver_create``; the answer shows its
    signing secret this once."""

    form_class = ReceiverCreateForm
    title = "New alert receiver"
    noun = "Alert receiver"
    list_route = "console:alert_receivers"

    def initial(self, name: str | None) -> dict[str, Any]:
        return {"enabled": True}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return receivers.receiver_create(
            name=data["name"],
            kind=data["kind"],
            url=data["url"],
            emails=data["emails"],
            enabled=data["enabled"],
        )

    def done(self, request: HttpRequest, result: Any) -> HttpResponse:
        return render(request, "console/alerts/receiver_created.html", {"receiver": result})


class ReceiverEditView(ServiceFormView):
    """``/console/alerts/receivers/<name>/edit/`` (admin): ``receiver_update``."""

    form_class = ReceiverEditForm
    title = "Edit alert receiver"
    noun = "Alert receiver"
    list_route = "console:alert_receivers"

    def initial(self, name: str | None) -> dict[str, Any]:
        receiver = _receiver(name)
        return {
            "url": receiver.url,
            "emails": ", ".join(receiver.emails),
            "enabled": receiver.enabled,
        }

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return receivers.receiver_update(
            name=name or "", url=data["url"], emails=data["emails"], enabled=data["enabled"]
        )


class ReceiverDeleteView(ManageConsoleRequired, View):
    """POST ``/console/alerts/receivers/<name>/delete/`` (admin): ``receiver_delete`` (its
    pending notifications fail, shown as failed)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        try:
            failed = receivers.receiver_delete(name=name)
        except NotFound as error:
            raise Http404(error.message) from error
        note = f"; {failed} pending notifications failed" if failed else ""
        messages.success(request, f"Alert receiver {name} deleted{note}.")
        return redirect("console:alert_receivers")


urlpatterns: list[URLPattern] = [
    path("alerts/", AlertsView.as_view(), name="alerts"),
    path("alerts/rules/", AlertRuleListView.as_view(), name="alert_rules"),
    path("alerts/rules/new/", AlertRuleCreateView.as_view(), name="alert_rule_create"),
    path("alerts/rules/<str:name>/edit/", AlertRuleEditView.as_view(), name="alert_rule_edit"),
    path(
        "alerts/rules/<str:name>/delete/", AlertRuleDeleteView.as_view(), name="alert_rule_delete"
    ),
    path("alerts/receivers/", ReceiverListView.as_view(), name="alert_receivers"),
    path("alerts/receivers/new/", ReceiverCreateView.as_view(), name="alert_receiver_create"),
    path(
        "alerts/receivers/<str:name>/edit/",
        ReceiverEditView.as_view(),
        name="alert_receiver_edit",
    ),
    path(
        "alerts/receivers/<str:name>/delete/",
        ReceiverDeleteView.as_view(),
        name="alert_receiver_delete",
    ),
    path(
        "alerts/silences/<int:silence_id>/expire/",
        SilenceExpireView.as_view(),
        name="alert_silence_expire",
    ),
    path(
        "alerts/notifications/<int:notification_id>/retry/",
        NotificationRetryView.as_view(),
        name="alert_notification_retry",
    ),
    path("alerts/<int:alert_id>/", AlertDetailView.as_view(), name="alert"),
    path("alerts/<int:alert_id>/silence/", AlertSilenceView.as_view(), name="alert_silence"),
]

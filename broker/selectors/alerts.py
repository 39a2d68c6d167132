"""Reads of Halfmoon's own alerts: the rules (the API, the console), the firing alerts with
their silences (the console's page and its banner on every page), an alert with its
notifications, and the notifications by state. Every read is bounded: the firing alerts
through their partial index, the rest by ``limit``."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q, QuerySet

from broker.errors import NotFound, not_found, silence_not_found
from broker.models import Alert, AlertNotification, AlertReceiver, AlertRule, AlertSilence

RECENT_ALERTS = 50
NOTIFICATIONS_SHOWN = 50
BANNER_ALERTS = 5
BANNER_FAILED_WINDOW_MS = 86_400_000
"""The banner counts the notifications that failed for good among those of the last day (the
alerts page lists them all)."""


def alert_rule_list() -> QuerySet[AlertRule]:
    """Every alert rule, by name, each with ``firing_count``: its alerts firing now."""
    firing = Count("alerts", filter=Q(alerts__state=Alert.State.FIRING))
    return AlertRule.objects.annotate(firing_count=firing).order_by("name")


def alert_rule_get(name: str) -> AlertRule:
    """The alert rule ``name``.

    Raises:
        NotFound: ``alert_rule_not_found``.
    """
    rule = AlertRule.objects.filter(name=name).first()
    if rule is None:
        raise not_found("alert_rule", name)
    return rule


def alert_receiver_list() -> QuerySet[AlertReceiver]:
    """Every receiver, by name."""
    return AlertReceiver.objects.order_by("name")


def alert_receiver_get(name: str) -> AlertReceiver:
    """The receiver ``name``.

    Raises:
        NotFound: ``alert_receiver_not_found``.
    """
    receiver = AlertReceiver.objects.filter(name=name).first()
    if receiver is None:
        raise not_found("alert_receiver", name)
    return receiver


def alert_silence_get(silence_id: int) -> AlertSilence:
    """The silence ``silence_id``, in force or over, with its rule.

    Raises:
        NotFound: ``alert_silence_not_found``.
    """
    silence = AlertSilence.objects.select_related("rule").filter(pk=silence_id).first()
    if silence is None:
        raise silence_not_found(silence_id)
    return silence


@dataclass
class FiringAlert:
    """A firing alert and the silence covering it now, if any (``silence``)."""

    alert: Alert
    silence: AlertSilence | None = None

    @property
    def silenced(self) -> bool:
        """True while a silence covers it."""
        return self.silence is not None


def active_silences(now: int) -> list[AlertSilence]:
    """The silences in force at ``now`` (ms), newest first, with their rules."""
    return list(
        AlertSilence.objects.filter(starts_timestamp__lte=now, ends_timestamp__gt=now)
        .select_related("rule")
        .order_by("-id")
    )


def firing_alerts(now: int) -> list[FiringAlert]:
    """Every firing alert, critical first then the oldest, each with the silence (of its rule
    on its group, or on every group of the rule) covering it at ``now`` (ms). One query when
    nothing fires, two otherwise."""
    alerts = sorted(
        Alert.objects.filter(state=Alert.State.FIRING),
        key=lambda a: (a.severity != "critical", a.started_timestamp, a.pk),
    )
    silences = active_silences(now) if alerts else []
    out = []
    for alert in alerts:
        silence = next(
            (s for s in silences if s.rule_id == alert.rule_id and s.group in ("", alert.subject)),
            None,
        )
        out.append(FiringAlert(alert, silence))
    return out


def recent_alerts(limit: int = RECENT_ALERTS) -> list[Alert]:
    """The latest ``limit`` resolved alerts, newest first."""
    return list(Alert.objects.filter(state=Alert.State.RESOLVED).order_by("-id")[:limit])


def alert_get(alert_id: int) -> Alert:
    """The alert ``alert_id``.

    Raises:
        NotFound: ``alert_not_found``.
    """
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        raise NotFound(
            f"Alert {alert_id} does not exist.", code="alert_not_found", details={"id": alert_id}
        )
    return alert


def alert_notifications(alert: Alert) -> list[AlertNotification]:
    """Every notification of ``alert``, oldest first."""
    return list(alert.notifications.order_by("id"))


def notifications_by_state(
    state: str | None = None, *, limit: int = NOTIFICATIONS_SHOWN
) -> list[AlertNotification]:
    """The latest ``limit`` notifications (of ``state`` when given), newest first, with their
    alerts."""
    qs = AlertNotification.objects.select_related("alert").order_by("-id")
    if state:
        qs = qs.filter(state=state)
    return list(qs[:limit])


def notifications_by_states(*, sent_limit: int) -> dict[str, list[AlertNotification]]:
    """The alerts page's notification lists: ``failed`` and ``pending`` (the latest
    ``NOTIFICATIONS_SHOWN`` of each) and the latest ``sent_limit`` ``sent``, newest first."""
    states = AlertNotification.State
    return {
        "failed": notifications_by_state(states.FAILED),
        "pending": notifications_by_state(states.PENDING),
        "sent": notifications_by_state(states.SENT, limit=sent_limit),
    }


def alert_configuration_counts() -> dict[str, int]:
    """How many alert rules there are (``rules``) and how many receivers are enabled
    (``receivers``): the alerts page's summary."""
    return {
        "rules": AlertRule.objects.count(),
        "receivers": AlertReceiver.objects.filter(enabled=True).count(),
    }


@dataclass
class Banner:
    """What the console's banner says on every page: the firing alerts not silenced (the
    first ``BANNER_ALERTS`` of them in ``shown``, all counted in ``firing``), how many more are
    silenced, and how many notifications of the last day failed for good."""

    firing: int = 0
    silenced: int = 0
    failed_notifications: int = 0
    shown: list[Alert] = field(default_factory=list)

    @property
    def visible(self) -> bool:
        """True when there is anything to say."""
        return bool(self.firing or self.silenced or self.failed_notifications)


BANNER_QUERIES = 2
"""Queries of ``banner`` when nothing fires (one more, the silences, while something does)."""


def banner(now: int) -> Banner:
    """The banner at ``now`` (ms). Small queries, whatever the numbers of alerts and
    notifications: the firing alerts (partial index), the silences in force (only while
    something fires), the failed notifications of the last day (``(state, id)`` index)."""
    out = Banner()
    for row in firing_alerts(now):
        if row.silenced:
            out.silenced += 1
            continue
        out.firing += 1
        if len(out.shown) < BANNER_ALERTS:
            out.shown.append(row.alert)
    out.failed_notifications = AlertNotification.objects.filter(
        state=AlertNotification.State.FAILED,
        created_timestamp__gte=now - BANNER_FAILED_WINDOW_MS,
    ).count()
    return out

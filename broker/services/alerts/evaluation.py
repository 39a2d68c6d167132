"""The evaluation of Halfmoon's own alert rules (beat, every
HALFMOON_ALERT_EVALUATION_INTERVAL_MS, ``tasks.alerts.alerts_tick``).

More: docs/design.md, "Module notes", broker/services/alerts/evaluation.py."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from django.db import transaction

from broker.conf import conf
from broker.models import Alert, AlertRule, AlertSilence
from broker.rules.alerts import (
    KINDS,
    AlertKind,
    Finding,
    NotificationEvent,
    alert_step,
    discard_rate_finding,
    dlq_growing_finding,
    fifo_blocked_finding,
    near_check_max_finding,
    oldest_pending_finding,
    scheduled_overdue_finding,
    unreachable_finding,
)
from broker.rules.clock import now_ms
from broker.selectors.blocked_message_groups import FifoBlockedCount, blocked_message_group_counts
from broker.selectors.overview import (
    OldestPending,
    discards_by_group,
    oldest_pending_per_group,
    pending_check_times_by_group,
)
from broker.selectors.reachability import GroupReachability, producer_group_reachability
from broker.selectors.scheduled_messages import OverdueTopic, scheduled_overdue_by_topic
from broker.selectors.topology import dead_letters_by_group
from broker.services.alerts.notifications import notifications_queue

logger = logging.getLogger("halfmoon.alerts")


class Figures:
    """What the rules of one evaluation look at, each read at most once (at ``now``, ms)."""

    def __init__(self, now: int) -> None:
        self.now = now
        self._discards: dict[int, dict[str, int]] = {}
        self._dead_letters: dict[int, dict[str, int]] = {}
        self._overdue: dict[int, dict[str, OverdueTopic]] = {}

    @cached_property
    def oldest(self) -> dict[str, OldestPending]:
        """The oldest PREPARED transaction of each producer group with any pending."""
        return {row.producer_group: row for row in oldest_pending_per_group(self.now)}

    @cached_property
    def fifo_blocked(self) -> dict[str, FifoBlockedCount]:
        """The blocked message groups of each FIFO consumer group with any."""
        return blocked_message_group_counts(now=self.now)

    @cached_property
    def check_times(self) -> dict[str, dict[int, int]]:
        """Pending transactions per producer group by check_times."""
        return pending_check_times_by_group()

    @cached_property
    def reachability(self) -> dict[str, GroupReachability]:
        """Every producer group's reachability."""
        return {row.name: row for row in producer_group_reachability()}

    def discards(self, window_s: int) -> dict[str, int]:
        """Discards per producer group in the last ``window_s`` seconds."""
        if window_s not in self._discards:
            self._discards[window_s] = discards_by_group(self.now - window_s * 1000)
        return self._discards[window_s]

    def dead_letters(self, window_s: int) -> dict[str, int]:
        """Dead letters per consumer group in the last ``window_s`` seconds."""
        if window_s not in self._dead_letters:
            self._dead_letters[window_s] = dead_letters_by_group(self.now - window_s * 1000)
        return self._dead_letters[window_s]

    def scheduled_overdue(self, threshold_s: int) -> dict[str, OverdueTopic]:
        """Per topic, its SCHEDULED messages more than ``threshold_s`` seconds past due."""
        if threshold_s not in self._overdue:
            self._overdue[threshold_s] = scheduled_overdue_by_topic(self.now - threshold_s * 1000)
        return self._overdue[threshold_s]


def rule_findings(rule: AlertRule, figures: Figures, *, check_max: int) -> dict[str, Finding]:
    """What ``rule`` sees now: a ``Finding`` per group it fires on (``rule.group`` only, or
    every group when it is ""), by group name. ``check_max``: HALFMOON_TRANSACTION_CHECK_MAX."""
    kind, now, threshold = AlertKind(rule.kind), figures.now, rule.threshold
    found: list[Finding | None] = []
    if kind == AlertKind.OLDEST_PENDING:
        found = [
            oldest_pending_finding(
                group,
                born_timestamp=row.born_timestamp,
                pending=row.pending,
                transaction_id=row.transaction_id,
                threshold_s=threshold,
                now=now,
            )
            for group, row in figures.oldest.items()
        ]
    elif kind == AlertKind.NEAR_CHECK_MAX:
        found = [
            near_check_max_finding(
                group, check_histogram=histogram, check_max=check_max, checks_left=threshold
            )
            for group, histogram in figures.check_times.items()
        ]
    elif kind == AlertKind.GROUP_UNREACHABLE:
        found = [
            unreachable_finding(
                group,
                down_since=row.down_since,
                last_error=row.last_check_error,
                threshold_s=threshold,
                now=now,
            )
            for group, row in figures.reachability.items()
        ]
    elif kind == AlertKind.DISCARD_RATE:
        found = [
            discard_rate_finding(group, discards=n, window_s=rule.window_s, per_hour=threshold)
            for group, n in figures.discards(rule.window_s).items()
        ]
    elif kind == AlertKind.DLQ_GROWING:
        found = [
            dlq_growing_finding(group, dead_letters=n, window_s=rule.window_s, threshold=threshold)
            for group, n in figures.dead_letters(rule.window_s).items()
        ]
    elif kind == AlertKind.FIFO_BLOCKED:
        found = [
            fifo_blocked_finding(
                group,
                blocked=row.blocked,
                oldest_since=row.oldest_since,
                message_group=row.message_group,
                threshold_s=threshold,
                now=now,
            )
            for group, row in figures.fifo_blocked.items()
        ]
    elif kind == AlertKind.SCHEDULED_OVERDUE:
        found = _scheduled_overdue_findings(rule, figures)
    return {f.subject: f for f in found if f is not None and rule.group in ("", f.subject)}


def _scheduled_overdue_findings(rule: AlertRule, figures: Figures) -> list[Finding | None]:
    """``scheduled_overdue``: a finding per topic with SCHEDULED messages past due by more than
    the rule's threshold (seconds)."""
    return [
        scheduled_overdue_finding(
            topic,
            overdue=row.overdue,
            oldest_due_timestamp=row.oldest_due_timestamp,
            threshold_s=rule.threshold,
            now=figures.now,
        )
        for topic, row in figures.scheduled_overdue(rule.threshold).items()
    ]


@dataclass
class EvaluationReport:
    """What one evaluation did: rules evaluated, alerts ``started``, ``resolved`` and still
    ``firing`` afterwards, and the notifications queued by event."""

    rules: int = 0
    started: int = 0
    resolved: int = 0
    firing: int = 0
    queued: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        """The report as plain values (the beat task's result, the logs)."""
        return {
            "rules": self.rules,
            "started": self.started,
            "resolved": self.resolved,
            "firing": self.firing,
            "queued": dict(self.queued),
        }


def repeat_interval_ms(rule: AlertRule) -> int:
    """The reminder interval of ``rule``'s alerts (ms): its own ``repeat_interval_s``, or
    HALFMOON_ALERT_REPEAT_INTERVAL_MS when it sets none; 0: no reminders."""
    if rule.repeat_interval_s is not None:
        return rule.repeat_interval_s * 1000
    return conf.alert_repeat_interval_ms


def silenced_at(silences: list[AlertSilence], rule: AlertRule, group: str, now: int) -> bool:
    """True when one of ``silences`` (of any rule) covers ``rule`` on ``group`` at ``now``:
    same rule, the group or every group (""), ``starts <= now < ends``."""
    return any(
        s.rule_id == rule.pk
        and s.group in ("", group)
        and s.starts_timestamp <= now < s.ends_timestamp
        for s in silences
    )


def alerts_evaluate(*, now: int | None = None) -> EvaluationReport:
    """Evaluate every alert rule at ``now`` (ms; default the clock) and move their alerts (see
    the module docstring). Returns what it did.

    Raises whatever the database raises; a failed evaluation leaves nothing of itself (the
    next one starts from the same alerts).
    """
    now = now_ms() if now is None else now
    report = EvaluationReport()
    check_max = conf.transaction_check_max
    with transaction.atomic():
        rules = {r.pk: r for r in AlertRule.objects.select_for_update().order_by("pk")}
        figures = Figures(now)
        firing = {
            (a.rule_id, a.subject): a
            for a in Alert.objects.select_for_update()
            .filter(state=Alert.State.FIRING)
            .order_by("pk")
        }
        silences = list(AlertSilence.objects.filter(ends_timestamp__gt=now))
        for rule in rules.values():
            if not rule.enabled:
                continue
            report.rules += 1
            findings = rule_findings(rule, figures, check_max=check_max)
            open_groups = {group for (rule_id, group) in firing if rule_id == rule.pk}
            for group in sorted(set(findings) | open_groups):
                _alert_move(
                    rule,
                    group,
                    findings.get(group),
                    firing.get((rule.pk, group)),
                    silenced=silenced_at(silences, rule, group, now),
                    now=now,
                    report=report,
                )
        for (rule_id, _), alert in firing.items():
            rule = rules.get(rule_id) if rule_id is not None else None
            if rule is None or not rule.enabled:  # disabled or deleted: nothing fires
                report.queued.update(alert_resolve(alert, rule=rule, now=now))
                report.resolved += 1
        report.firing = Alert.objects.filter(state=Alert.State.FIRING).count()
    if report.started or report.resolved:
        logger.info("alerts evaluated: %s", report.as_dict())
    return report


def _alert_move(
    rule: AlertRule,
    group: str,
    finding: Finding | None,
    alert: Alert | None,
    *,
    silenced: bool,
    now: int,
    report: EvaluationReport,
) -> None:
    """One step of the alert of ``rule`` on ``group`` (``alert``: its firing row, if any)."""
    step = alert_step(
        was_firing=alert is not None,
        firing=finding is not None,
        silenced=silenced,
        notified=bool(alert and alert.notified),
        last_notified_timestamp=alert.last_notified_timestamp if alert else None,
        repeat_interval_ms=repeat_interval_ms(rule),
        now=now,
    )
    if alert is None:
        if not step.firing or finding is None:
            return
        alert = Alert.objects.create(
            rule=rule,
            rule_name=rule.name,
            kind=rule.kind,
            severity=rule.severity,
            subject_label=KINDS[AlertKind(rule.kind)].subject,
            subject=group,
            state=Alert.State.FIRING,
            value=finding.value,
            summary=finding.summary[:512],
            started_timestamp=now,
            evaluated_timestamp=now,
        )
        report.started += 1
    elif not step.firing:
        report.queued.update(alert_resolve(alert, rule=rule, now=now))
        report.resolved += 1
        return
    elif finding is not None:
        alert.value, alert.summary = finding.value, finding.summary[:512]
        alert.severity = rule.severity
        alert.evaluated_timestamp = now
    if step.notify is not None:
        alert.notified = True
        alert.last_notified_timestamp = now
        report.queued.update(notifications_queue(alert, rule=rule, event=step.notify, now=now))
    alert.save()


def alert_resolve(alert: Alert, *, rule: AlertRule | None, now: int) -> Counter[str]:
    """Resolve the firing ``alert`` at ``now`` (ms), queueing a resolved notification when a
    firing one went out (``broker.rules.alerts.alert_step``); ``rule``: its rule, None once
    deleted. Inside the caller's transaction, with ``alert`` locked. Returns the notifications
    queued by event."""
    step = alert_step(
        was_firing=True,
        firing=False,
        silenced=False,
        notified=alert.notified,
        last_notified_timestamp=alert.last_notified_timestamp,
        repeat_interval_ms=0,
        now=now,
    )
    alert.state = Alert.State.RESOLVED
    alert.resolved_timestamp = now
    alert.evaluated_timestamp = now
    alert.save()
    if step.notify == NotificationEvent.RESOLVED:
        return notifications_queue(alert, rule=rule, event=step.notify, now=now)
    return Counter()

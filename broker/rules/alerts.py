"""Halfmoon's own alerts: what each kind of alert rule watches, when it fires, and how an alert
moves between firing and resolved with one notification each way. Pure: plain values in,
plain values out (times in ms since the epoch, spans in ms unless the name says ``_s``); no
database, no settings.

More: docs/design.md, "Module notes", broker/rules/alerts.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.rules.choices import TextChoices
from broker.rules.durations import duration_text

RUNBOOK = "docs/alerts.md"
"""Where the runbook lives in the source tree; each kind's ``runbook_url`` is an anchor in it
(the shipped Prometheus rules link into the same file)."""


class AlertKind(TextChoices):
    """What an alert rule watches (``AlertRule.kind``)."""

    OLDEST_PENDING = "oldest_pending"
    NEAR_CHECK_MAX = "near_check_max"
    GROUP_UNREACHABLE = "group_unreachable"
    DISCARD_RATE = "discard_rate"
    DLQ_GROWING = "dlq_growing"
    FIFO_BLOCKED = "fifo_blocked"
    SCHEDULED_OVERDUE = "scheduled_overdue"


class AlertSeverity(TextChoices):
    """How urgent an alert is (the ``severity`` label, as in the Prometheus rules)."""

    WARNING = "warning"
    CRITICAL = "critical"


class Subject(TextChoices):
    """What an alert is about: the label naming its group."""

    PRODUCER_GROUP = "producer_group"
    CONSUMER_GROUP = "consumer_group"
    TOPIC = "topic"


@dataclass(frozen=True)
class KindSpec:
    """One kind of alert rule: its title, which group it is about (``subject``), what its
    ``threshold`` means (``threshold_unit``) and its default, whether ``window_s`` applies, and
    the runbook section (an anchor of ``RUNBOOK``)."""

    title: str
    subject: Subject
    threshold_unit: str
    default_threshold: int
    uses_window: bool
    default_window_s: int
    anchor: str

    @property
    def runbook_url(self) -> str:
        """``docs/alerts.md#<anchor>``."""
        return f"{RUNBOOK}#{self.anchor}"


KINDS: dict[AlertKind, KindSpec] = {
    AlertKind.OLDEST_PENDING: KindSpec(
        "Oldest pending transaction too old",
        Subject.PRODUCER_GROUP,
        "seconds",
        600,
        False,
        0,
        "oldest-pending-transaction-too-old",
    ),
    AlertKind.NEAR_CHECK_MAX: KindSpec(
        "Transaction near the check max",
        Subject.PRODUCER_GROUP,
        "checks left",
        2,
        False,
        0,
        "transaction-near-the-check-max",
    ),
    AlertKind.GROUP_UNREACHABLE: KindSpec(
        "Producer group unreachable",
        Subject.PRODUCER_GROUP,
        "seconds",
        300,
        False,
        0,
        "producer-group-unreachable",
    ),
    AlertKind.DISCARD_RATE: KindSpec(
        "Discard rate high",
        Subject.PRODUCER_GROUP,
        "discards per hour",
        10,
        True,
        3600,
        "discard-rate-high",
    ),
    AlertKind.DLQ_GROWING: KindSpec(
        "Consumer dead-letter queue growing",
        Subject.CONSUMER_GROUP,
        "messages",
        0,
        True,
        900,
        "consumer-dead-letter-queue-growing",
    ),
    AlertKind.FIFO_BLOCKED: KindSpec(
        "FIFO message group blocked",
        Subject.CONSUMER_GROUP,
        "seconds",
        300,
        False,
        0,
        "fifo-message-group-blocked",
    ),
    AlertKind.SCHEDULED_OVERDUE: KindSpec(
        "Scheduled messages overdue",
        Subject.TOPIC,
        "seconds",
        60,
        False,
        0,
        "scheduled-messages-overdue",
    ),
}
"""Every kind, with its meaning (see the module docstring)."""

WINDOW_S_MIN, WINDOW_S_MAX = 1, 7 * 86_400
"""Bounds of a rule's ``window_s`` (seconds): at most a week, so a window read stays bounded."""

THRESHOLD_MAX = 10**9
"""Upper bound of a rule's ``threshold`` (every kind's unit fits)."""


@dataclass(frozen=True)
class Finding:
    """What a rule sees on one group at one evaluation: the group (``subject``), the figure
    compared with the threshold (``value``, in the kind's unit: s, checks, per hour, messages)
    and one line for the operator (``summary``)."""

    subject: str
    value: float
    summary: str


def oldest_pending_finding(
    group: str,
    *,
    born_timestamp: int,
    pending: int,
    transaction_id: str,
    threshold_s: int,
    now: int,
) -> Finding | None:
    """``oldest_pending``: fires when the group's oldest PREPARED transaction (born at
    ``born_timestamp``, ms; ``pending`` transactions in all) is older than ``threshold_s``
    seconds at ``now``. ``value``: its age in seconds."""
    age_ms = max(0, now - born_timestamp)
    if age_ms <= threshold_s * 1000:
        return None
    return Finding(
        group,
        age_ms / 1000,
        f"{pending} pending in {group}; the oldest, {transaction_id}, for "
        f"{duration_text(age_ms)} (over {duration_text(threshold_s * 1000)})",
    )


def near_check_max_finding(
    group: str, *, check_histogram: Mapping[int, int], check_max: int, checks_left: int
) -> Finding | None:
    """``near_check_max``: fires when a PREPARED transaction of the group has had at least
    ``check_max - checks_left`` checks delivered (``check_histogram``: pending transactions
    by ``check_times``; ``check_max``: HALFMOON_TRANSACTION_CHECK_MAX, after which the scan
    discards). ``value``: how many such transactions."""
    floor = max(0, check_max - checks_left)
    at_risk = sum(n for times, n in check_histogram.items() if times >= floor and n > 0)
    if not at_risk:
        return None
    most = max(times for times, n in check_histogram.items() if n > 0)
    return Finding(
        group,
        float(at_risk),
        f"{at_risk} pending in {group} within {checks_left} checks of the check max "
        f"(the most checked: {most} of {check_max}; discarded at {check_max})",
    )


def unreachable_finding(
    group: str, *, down_since: int | None, last_error: str, threshold_s: int, now: int
) -> Finding | None:
    """``group_unreachable``: fires when the group's checks have not got through since
    ``down_since`` (ms, ``broker.rules.checks.group_down_since``; None: they do) for at least
    ``threshold_s`` seconds at ``now``. ``value``: seconds since ``down_since``."""
    if down_since is None or now - down_since < threshold_s * 1000:
        return None
    down_ms = max(0, now - down_since)
    error = f": {last_error}" if last_error else ""
    return Finding(
        group,
        down_ms / 1000,
        f"checks to {group} not answered for {duration_text(down_ms)}{error}",
    )


def rate_per_hour(count: int, window_s: int) -> float:
    """``count`` events over ``window_s`` seconds, as a rate per hour."""
    return count * 3600 / window_s


def discard_rate_finding(
    group: str, *, discards: int, window_s: int, per_hour: int
) -> Finding | None:
    """``discard_rate``: fires when the group's ``discards`` over the last ``window_s`` seconds,
    as a rate per hour (``rate_per_hour``), are over ``per_hour``. ``value``: that rate."""
    rate = rate_per_hour(discards, window_s)
    if rate <= per_hour:
        return None
    return Finding(
        group,
        rate,
        f"{discards} transactions of {group} discarded in the last "
        f"{duration_text(window_s * 1000)} ({rate:g} per hour, over {per_hour})",
    )


def dlq_growing_finding(
    group: str, *, dead_letters: int, window_s: int, threshold: int
) -> Finding | None:
    """``dlq_growing``: fires when more than ``threshold`` messages of the consumer group were
    dead-lettered (moved to ``%DLQ%{group}`` after its max delivery attempts) in the last
    ``window_s`` seconds. ``value``: how many."""
    if dead_letters <= threshold:
        return None
    return Finding(
        group,
        float(dead_letters),
        f"{dead_letters} messages of consumer group {group} moved to %DLQ%{group} in the "
        f"last {duration_text(window_s * 1000)}",
    )


def fifo_blocked_finding(
    group: str,
    *,
    blocked: int,
    oldest_since: int | None,
    message_group: str,
    threshold_s: int,
    now: int,
) -> Finding | None:
    """``fifo_blocked``: fires when a message group of the FIFO consumer group has been blocked
    (its head failed at least once and holds back the messages behind it) since
    ``oldest_since`` (ms, the oldest of the group's ``blocked`` message groups: its head's
    first hand-out; None, unknown: no finding) for more than ``threshold_s`` seconds at
    ``now``. ``value``: that age in seconds."""
    if oldest_since is None:
        return None
    age_ms = max(0, now - oldest_since)
    if age_ms <= threshold_s * 1000:
        return None
    return Finding(
        group,
        age_ms / 1000,
        f"{blocked} message groups of FIFO consumer group {group} blocked; the oldest, "
        f"{message_group}, for {duration_text(age_ms)} (over {duration_text(threshold_s * 1000)})",
    )


def scheduled_overdue_finding(
    topic: str, *, overdue: int, oldest_due_timestamp: int, threshold_s: int, now: int
) -> Finding | None:
    """``scheduled_overdue``: fires when a delay or timer message of ``topic`` is still
    SCHEDULED (not moved to its topic, not recalled) more than ``threshold_s`` seconds after
    its due time: the timer is down or behind, or the message's queue is gone. ``overdue``:
    how many of the topic's are past due by more than the threshold; ``oldest_due_timestamp``
    (ms): the earliest due time of them. ``value``: seconds the oldest is past due."""
    late_ms = now - oldest_due_timestamp
    if overdue <= 0 or late_ms <= threshold_s * 1000:
        return None
    return Finding(
        topic,
        late_ms / 1000,
        f"{overdue} scheduled messages of topic {topic} not delivered more than "
        f"{duration_text(threshold_s * 1000)} after their time; the oldest due "
        f"{duration_text(late_ms)} ago",
    )


class NotificationEvent(TextChoices):
    """Why a notification is sent: an alert started firing (or its silence ended with it
    still firing and never notified), a reminder while it fires, or it resolved."""

    FIRING = "firing"
    REMINDER = "reminder"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Step:
    """What one evaluation does to one alert: whether it is firing afterwards (``firing``)
    and which notification, if any, it sends (``notify``)."""

    firing: bool
    notify: NotificationEvent | None = None


def alert_step(
    *,
    was_firing: bool,
    firing: bool,
    silenced: bool,
    notified: bool,
    last_notified_timestamp: int | None,
    repeat_interval_ms: int,
    now: int,
) -> Step:
    """The state machine of one alert (a rule on one group), at one evaluation.

    Args:
        was_firing: an alert of this rule and group was firing before this evaluation.
        firing: the rule fires on the group now (a ``Finding``).
        silenced: a silence covers the rule and group now.
        notified: a firing notification of this alert went out (queued).
        last_notified_timestamp: when the last firing or reminder notification was queued (ms).
        repeat_interval_ms: the reminder interval (ms); 0: no reminders.
        now: the clock (ms).

    Returns:
        A new alert sends ``firing`` unless silenced; a firing one sends nothing more, except
        ``firing`` once its silence is over if none went out yet, and ``reminder`` every
        ``repeat_interval_ms`` after the last one when not silenced; an alert that stops firing
        sends ``resolved`` exactly when a firing notification went out (silenced or not, so no
        receiver is left with an alert that never resolves).
    """
    if not was_firing:
        if not firing:
            return Step(False)
        return Step(True, None if silenced else NotificationEvent.FIRING)
    if not firing:
        return Step(False, NotificationEvent.RESOLVED if notified else None)
    if silenced:
        return Step(True)
    if not notified:
        return Step(True, NotificationEvent.FIRING)
    due = (
        repeat_interval_ms > 0
        and last_notified_timestamp is not None
        and now - last_notified_timestamp >= repeat_interval_ms
    )
    return Step(True, NotificationEvent.REMINDER if due else None)

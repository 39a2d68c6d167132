"""Why a half message's next back-check happens when it does: the predicted
time of the next check, what it waits for and which settings contradict each other. Plain
values in, a frozen dataclass out: times in ms since the epoch, durations in ms.

Every rule is the one the scan applies (``broker.rules.checks``): the first check after the
transaction timeout or the check immunity (``first_check_timestamp``), one check interval after
a check (``next_check_after_check``), the backoff of undelivered checks and of a silent group
(``backoff_ms``), the discards (``discard_reason``: needSkip, then needDiscard) and a group's
reachability (``group_down_since``). The per-group caps are those of
``broker.services.checks.check_claim`` (HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT per half queue per
scan) and ``check_rate_limit`` (HALFMOON_CHECK_GROUP_MAX_PER_SECOND, across every worker).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.rules.checks import (
    backoff_ms,
    check_immunity_ms,
    discard_reason,
    group_down_since,
)
from broker.rules.states import DiscardReason

SOURCE_DEFAULT = "default"
"""The value is the setting's default (``broker.rules.broker_settings.BROKER_SETTINGS``)."""
SOURCE_SETTING = "setting"
"""The value was set in the broker's settings (its ``HALFMOON_...`` environment variable)."""
SOURCE_PROPERTY = "message property"
"""The value is the half message's ``CHECK_IMMUNITY_TIME_IN_SECONDS``."""

# What the next check waits for (reason codes; the first one decided the time).
REASON_RESOLVED = "resolved"
REASON_TRANSACTION_TIMEOUT = "transaction_timeout"
REASON_CHECK_IMMUNITY = "check_immunity"
REASON_CHECK_INTERVAL = "check_interval"
REASON_UNDELIVERED_BACKOFF = "undelivered_backoff"
REASON_DUE = "due"
REASON_GROUP_BACKOFF = "group_backoff"
REASON_GROUP_IN_FLIGHT_CAP = "group_in_flight_cap"
REASON_GROUP_RATE_CAP = "group_rate_cap"
REASON_NO_PENDING = "no_pending"

REASONS: dict[str, str] = {
    REASON_RESOLVED: "The transaction is resolved: it is never checked again.",
    REASON_TRANSACTION_TIMEOUT: "The first check waits for the transaction timeout after the "
    "half message was stored (transactionTimeOut).",
    REASON_CHECK_IMMUNITY: "The first check waits for the check immunity of the half message "
    "(CHECK_IMMUNITY_TIME_IN_SECONDS, longer than the transaction timeout).",
    REASON_CHECK_INTERVAL: "The next check waits one check interval after the last check "
    "(transactionCheckInterval).",
    REASON_UNDELIVERED_BACKOFF: "The last check could not be delivered: it is retried after a "
    "backoff doubling from HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS up to the check interval.",
    REASON_DUE: "The check is due: the next scan takes it.",
    REASON_GROUP_BACKOFF: "The producer group answered none of its last checks: no check goes "
    "to it before its backoff ends.",
    REASON_GROUP_IN_FLIGHT_CAP: "More of the group's checks are due before it on its half queue "
    "than HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT: it waits for later scans.",
    REASON_GROUP_RATE_CAP: "More of the group's checks are due before it than "
    "HALFMOON_CHECK_GROUP_MAX_PER_SECOND: it waits for later seconds.",
    REASON_NO_PENDING: "The producer group has no pending transaction: nothing to check.",
}

# What happens at the predicted time.
OUTCOME_CHECK = "check"
OUTCOME_DISCARD_CHECK_MAX = "discard_check_max"
OUTCOME_DISCARD_FILE_RESERVED = "discard_file_reserved"
OUTCOME_NONE = "none"

# Settings or states that contradict each other.
WARNING_IMMUNITY_BEYOND_CHECKS = "immunity_beyond_checks"
WARNING_GROUP_DOWN = "group_down"
WARNING_CHECK_MAX_DISCARD = "check_max_discard"
WARNING_FILE_RESERVED_DISCARD = "file_reserved_discard"
WARNING_FILE_RESERVED_BEFORE_CHECK_MAX = "file_reserved_before_check_max"

WARNINGS: dict[str, str] = {
    WARNING_IMMUNITY_BEYOND_CHECKS: "The check immunity is longer than the check max times the "
    "check interval: the producer's immunity outlasts every check the broker would make.",
    WARNING_GROUP_DOWN: "The producer group's checks have not got through since the time shown: "
    "the next check may not reach a producer.",
    WARNING_CHECK_MAX_DISCARD: "The check max is reached: the next scan discards the "
    "transaction to TRANS_CHECK_MAX_TIME_TOPIC instead of checking it.",
    WARNING_FILE_RESERVED_DISCARD: "The half message outlives HALFMOON_FILE_RESERVED_HOURS "
    "before its next check: it is discarded instead of checked.",
    WARNING_FILE_RESERVED_BEFORE_CHECK_MAX: "HALFMOON_FILE_RESERVED_HOURS ends before the "
    "transaction timeout plus the check max times the check interval: a silent transaction is "
    "discarded by age before it could get all its checks.",
}


@dataclass(frozen=True)
class SourcedValue:
    """A setting's effective value and where it comes from (``SOURCE_*``)."""

    value: int
    source: str


@dataclass(frozen=True)
class CheckSettings:
    """The broker settings the back-check scan reads, each with its source."""

    transaction_timeout_ms: SourcedValue
    """RocketMQ BrokerConfig transactionTimeOut (HALFMOON_TRANSACTION_TIMEOUT_MS), ms."""
    check_interval_ms: SourcedValue
    """RocketMQ BrokerConfig transactionCheckInterval (HALFMOON_TRANSACTION_CHECK_INTERVAL_MS), ms."""
    check_max: SourcedValue
    """RocketMQ BrokerConfig transactionCheckMax (HALFMOON_TRANSACTION_CHECK_MAX), checks."""
    file_reserved_hours: SourcedValue
    """RocketMQ MessageStoreConfig fileReservedTime (HALFMOON_FILE_RESERVED_HOURS), hours."""
    undelivered_backoff_ms: SourcedValue
    """First backoff of an undelivered check or a silent group
    (HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS), ms; doubles up to the check interval."""
    group_max_in_flight: SourcedValue
    """Checks of one group claimed per half queue per scan (HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT)."""
    group_max_per_second: SourcedValue
    """Checks sent to one group per second (HALFMOON_CHECK_GROUP_MAX_PER_SECOND)."""
    scan_interval_ms: int
    """How often a scan starts (HALFMOON_CHECK_SCAN_INTERVAL_MS), ms."""


@dataclass(frozen=True)
class GroupState:
    """A producer group's back-check state (``ProducerGroup``), times in ms."""

    unreachable_since: int | None = None
    unanswered_since: int | None = None
    check_failures: int = 0
    check_backoff_until: int | None = None


@dataclass(frozen=True)
class PendingCheck:
    """One pending (or resolved) transaction, as the scan sees it; times in ms."""

    resolved: bool
    born_timestamp: int
    check_times: int
    next_check_timestamp: int | None
    last_check_timestamp: int | None
    undelivered_checks: int
    immunity_seconds: int | None
    """The half message's valid CHECK_IMMUNITY_TIME_IN_SECONDS, or None."""
    due_ahead_in_queue: int = 0
    """The group's pending transactions due before this one on its half queue."""
    due_ahead_in_group: int = 0
    """The group's pending transactions due before this one, all half queues."""


@dataclass(frozen=True)
class CheckExplanation:
    """The predicted next check (ms, None: no check), what it waits for (``REASON_*``, the
    deciding one first), what happens then (``OUTCOME_*``), the warnings (``WARNING_*``), and
    the effective values with their sources (ms unless the name says otherwise)."""

    predicted_timestamp: int | None
    reasons: tuple[str, ...]
    outcome: str
    warnings: tuple[str, ...]
    values: dict[str, SourcedValue]
    down_since: int | None


def source_of(value: int, default: int) -> str:
    """``SOURCE_DEFAULT`` when a setting's value is its default, else ``SOURCE_SETTING``."""
    return SOURCE_DEFAULT if value == default else SOURCE_SETTING


def immunity_value(settings: CheckSettings, immunity_seconds: int | None) -> SourcedValue:
    """The effective check immunity (ms, ``broker.rules.checks.check_immunity_ms``): from the
    message property when it is longer than the transaction timeout, else the timeout's."""
    timeout = settings.transaction_timeout_ms
    value = check_immunity_ms(
        transaction_timeout_ms=timeout.value, immunity_seconds=immunity_seconds
    )
    if immunity_seconds is not None and immunity_seconds * 1000 > timeout.value:
        return SourcedValue(value, SOURCE_PROPERTY)
    return SourcedValue(value, timeout.source)


def settings_warnings(settings: CheckSettings) -> list[str]:
    """Warnings about the settings alone: HALFMOON_FILE_RESERVED_HOURS (needSkip) ends before a
    silent transaction could get its check max of checks (timeout + max x interval)."""
    checks_end = (
        settings.transaction_timeout_ms.value
        + settings.check_max.value * settings.check_interval_ms.value
    )
    if settings.file_reserved_hours.value * 3_600_000 < checks_end:
        return [WARNING_FILE_RESERVED_BEFORE_CHECK_MAX]
    return []


def _values(settings: CheckSettings, group: GroupState) -> dict[str, SourcedValue]:
    backoff = settings.undelivered_backoff_ms
    group_backoff = backoff_ms(
        group.check_failures, base_ms=backoff.value, cap_ms=settings.check_interval_ms.value
    )
    return {
        "transaction_timeout_ms": settings.transaction_timeout_ms,
        "check_interval_ms": settings.check_interval_ms,
        "check_max": settings.check_max,
        "file_reserved_hours": settings.file_reserved_hours,
        "undelivered_backoff_ms": backoff,
        "group_backoff_ms": SourcedValue(group_backoff, backoff.source),
        "group_max_in_flight": settings.group_max_in_flight,
        "group_max_per_second": settings.group_max_per_second,
    }


def _first_reason(settings: CheckSettings, tx: PendingCheck) -> str:
    """What set the stored next check time: a failed delivery's backoff, the immunity or
    timeout before the first check, or the check interval after the last one."""
    if tx.undelivered_checks > 0:
        return REASON_UNDELIVERED_BACKOFF
    if tx.last_check_timestamp is None:
        if immunity_value(settings, tx.immunity_seconds).source == SOURCE_PROPERTY:
            return REASON_CHECK_IMMUNITY
        return REASON_TRANSACTION_TIMEOUT
    return REASON_CHECK_INTERVAL


def explain_check(
    *, now: int, settings: CheckSettings, group: GroupState, tx: PendingCheck | None
) -> CheckExplanation:
    """Predict the next check of ``tx`` (None: a group with no pending transaction) at ``now``.

    The time is the stored next check time (set by the rules named in the module docstring),
    at the earliest ``now`` (a due check waits for the next scan), pushed past the group's
    backoff, then by the group's caps: one more scan per HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT of
    the group's checks due before it on its half queue, one more second per
    HALFMOON_CHECK_GROUP_MAX_PER_SECOND of them on every queue (whichever is later). At that
    time the scan discards rather than checks when ``discard_reason`` says so.
    """
    values = _values(settings, group)
    down = group_down_since(
        unreachable_since=group.unreachable_since, unanswered_since=group.unanswered_since
    )
    warnings = settings_warnings(settings)
    if down is not None:
        warnings.append(WARNING_GROUP_DOWN)
    if tx is None or tx.resolved or tx.next_check_timestamp is None:
        reason = REASON_NO_PENDING if tx is None else REASON_RESOLVED
        return CheckExplanation(None, (reason,), OUTCOME_NONE, tuple(warnings), values, down)
    immunity = immunity_value(settings, tx.immunity_seconds)
    values["check_immunity_ms"] = immunity
    if tx.undelivered_checks > 0:
        values["undelivered_backoff_now_ms"] = SourcedValue(
            backoff_ms(
                tx.undelivered_checks,
                base_ms=settings.undelivered_backoff_ms.value,
                cap_ms=settings.check_interval_ms.value,
            ),
            settings.undelivered_backoff_ms.source,
        )
    reasons = [_first_reason(settings, tx)]
    predicted = tx.next_check_timestamp
    if predicted <= now:
        predicted = now
        reasons.append(REASON_DUE)
    if group.check_backoff_until is not None and group.check_backoff_until > predicted:
        predicted = group.check_backoff_until
        reasons.append(REASON_GROUP_BACKOFF)
    scans = tx.due_ahead_in_queue // settings.group_max_in_flight.value
    seconds = tx.due_ahead_in_group // settings.group_max_per_second.value
    wait = max(scans * settings.scan_interval_ms, seconds * 1000)
    if scans > 0:
        reasons.append(REASON_GROUP_IN_FLIGHT_CAP)
    if seconds > 0:
        reasons.append(REASON_GROUP_RATE_CAP)
    predicted += wait
    discard = discard_reason(
        check_times=tx.check_times,
        born_timestamp=tx.born_timestamp,
        now=predicted,
        transaction_check_max=settings.check_max.value,
        file_reserved_hours=settings.file_reserved_hours.value,
    )
    if discard == DiscardReason.FILE_RESERVED_TIME:
        outcome = OUTCOME_DISCARD_FILE_RESERVED
        warnings.append(WARNING_FILE_RESERVED_DISCARD)
    elif discard == DiscardReason.CHECK_MAX:
        outcome = OUTCOME_DISCARD_CHECK_MAX
        warnings.append(WARNING_CHECK_MAX_DISCARD)
    else:
        outcome = OUTCOME_CHECK
    if immunity.value > settings.check_max.value * settings.check_interval_ms.value:
        warnings.append(WARNING_IMMUNITY_BEYOND_CHECKS)
    return CheckExplanation(predicted, tuple(reasons), outcome, tuple(warnings), values, down)

"""The "Why the next check happens when it does" panel of the transaction page and the
producer group page: ``broker.selectors.check_explanations``' result as the rows and sentences
the partial ``console/_check_explanation.html`` renders."""

from __future__ import annotations

from dataclasses import dataclass

from broker.rules.check_explanation import REASONS, WARNINGS, CheckExplanation

_VALUES: dict[str, tuple[str, str]] = {
    # value name: (label with its setting and RocketMQ name, unit: ms, hours or count)
    "transaction_timeout_ms": (
        "Transaction timeout (HALFMOON_TRANSACTION_TIMEOUT_MS, transactionTimeOut)",
        "ms",
    ),
    "check_immunity_ms": (
        "Check immunity (CHECK_IMMUNITY_TIME_IN_SECONDS, else the timeout)",
        "ms",
    ),
    "check_interval_ms": (
        "Check interval (HALFMOON_TRANSACTION_CHECK_INTERVAL_MS, transactionCheckInterval)",
        "ms",
    ),
    "check_max": ("Check max (HALFMOON_TRANSACTION_CHECK_MAX, transactionCheckMax)", "count"),
    "file_reserved_hours": (
        "File reserved time (HALFMOON_FILE_RESERVED_HOURS, fileReservedTime)",
        "hours",
    ),
    "undelivered_backoff_ms": (
        "Undelivered-check backoff, first (HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS)",
        "ms",
    ),
    "undelivered_backoff_now_ms": ("Undelivered-check backoff, now", "ms"),
    "group_backoff_ms": ("Group's unanswered backoff after its failed rounds", "ms"),
    "group_max_in_flight": (
        "Group's checks per half queue per scan (HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT)",
        "count",
    ),
    "group_max_per_second": (
        "Group's checks per second (HALFMOON_CHECK_GROUP_MAX_PER_SECOND)",
        "count",
    ),
}

_OUTCOMES = {
    "check": "a back-check",
    "discard_check_max": "a discard to TRANS_CHECK_MAX_TIME_TOPIC (check max reached)",
    "discard_file_reserved": "a discard to TRANS_CHECK_MAX_TIME_TOPIC (older than the file reserved time)",
    "none": "nothing",
}


@dataclass(frozen=True)
class ValueRow:
    name: str
    label: str
    value: int
    unit: str
    source: str


@dataclass(frozen=True)
class CheckPanel:
    """What the partial shows: the predicted time (ms, None: no check), the outcome, the
    reasons and warnings as (code, sentence), the group's down time and the value rows."""

    predicted_timestamp: int | None
    outcome: str
    outcome_text: str
    reasons: list[tuple[str, str]]
    warnings: list[tuple[str, str]]
    down_since: int | None
    values: list[ValueRow]


def check_panel(e: CheckExplanation) -> CheckPanel:
    """The panel of explanation ``e``."""
    return CheckPanel(
        predicted_timestamp=e.predicted_timestamp,
        outcome=e.outcome,
        outcome_text=_OUTCOMES[e.outcome],
        reasons=[(code, REASONS[code]) for code in e.reasons],
        warnings=[(code, WARNINGS[code]) for code in e.warnings],
        down_since=e.down_since,
        values=[
            ValueRow(
                name=name,
                label=_VALUES[name][0],
                value=v.value,
                unit=_VALUES[name][1],
                source=v.source,
            )
            for name, v in e.values.items()
        ],
    )

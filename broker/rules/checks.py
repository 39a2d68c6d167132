"""When a half message is checked, backed off or discarded (RocketMQ
``TransactionalMessageServiceImpl.check``: needDiscard, needSkip, the check immunity of
``CHECK_IMMUNITY_TIME_IN_SECONDS``, transactionTimeOut, transactionCheckInterval). Plain values
in, plain values out: times in ms since the epoch, durations in ms."""

from __future__ import annotations

from broker.rules.states import CheckAnswer, DiscardReason

MAX_CHECK_IMMUNITY_SECONDS = 3600
"""Upper bound of CHECK_IMMUNITY_TIME_IN_SECONDS (RocketMQ 5 proxy caps it at 3600 s)."""

BACKOFF_MAX_DOUBLINGS = 20
"""A backoff stops doubling after this many failures (the interval caps it long before)."""


def check_immunity_valid(seconds: int) -> bool:
    """True when a producer's CHECK_IMMUNITY_TIME_IN_SECONDS is within 0..3600."""
    return 0 <= seconds <= MAX_CHECK_IMMUNITY_SECONDS


def check_immunity_ms(*, transaction_timeout_ms: int, immunity_seconds: int | None) -> int:
    """How long after its birth a half message is first checked (ms): the transaction timeout
    (transactionTimeOut), or the producer's CHECK_IMMUNITY_TIME_IN_SECONDS when that is longer;
    a shorter immunity is raised to the timeout (RocketMQ ``check()``: ``valueOfCurrentMinusBorn
    < checkImmunityTime`` skips, and ``transactionTimeOut`` applies to every message).

    ``immunity_seconds`` must already be valid (``check_immunity_valid``); None: not set.
    """
    if immunity_seconds is None:
        return transaction_timeout_ms
    return max(transaction_timeout_ms, immunity_seconds * 1000)


def first_check_timestamp(
    *, born_timestamp: int, transaction_timeout_ms: int, immunity_seconds: int | None
) -> int:
    """When a new half message is first due for a back-check (ms since the epoch)."""
    return born_timestamp + check_immunity_ms(
        transaction_timeout_ms=transaction_timeout_ms, immunity_seconds=immunity_seconds
    )


def need_discard(check_times: int, *, transaction_check_max: int) -> bool:
    """RocketMQ ``needDiscard``: a transaction whose delivered checks reached
    transactionCheckMax is discarded instead of checked again."""
    return check_times >= transaction_check_max


def need_skip(born_timestamp: int, *, now: int, file_reserved_hours: int) -> bool:
    """RocketMQ ``needSkip``: a half message older than fileReservedTime (hours) is discarded
    whatever its check count."""
    return now - born_timestamp > file_reserved_hours * 3_600_000


def discard_reason(
    *,
    check_times: int,
    born_timestamp: int,
    now: int,
    transaction_check_max: int,
    file_reserved_hours: int,
) -> DiscardReason | None:
    """Why a due transaction must be discarded now, or None to check it: needSkip first (the
    file reserved time), then needDiscard (the check max), as RocketMQ's ``check()`` orders them.
    """
    if need_skip(born_timestamp, now=now, file_reserved_hours=file_reserved_hours):
        return DiscardReason.FILE_RESERVED_TIME
    if need_discard(check_times, transaction_check_max=transaction_check_max):
        return DiscardReason.CHECK_MAX
    return None


def backoff_ms(failures: int, *, base_ms: int, cap_ms: int) -> int:
    """Exponential backoff after ``failures`` consecutive failures (1 on the first): ``base_ms``,
    then doubling, never above ``cap_ms`` (the check interval). Used for undelivered checks
    (HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS) and for a producer group none of whose checks were
    answered. ``failures`` below 1 counts as 1."""
    doublings = min(max(failures, 1) - 1, BACKOFF_MAX_DOUBLINGS)
    return min(cap_ms, base_ms * 2**doublings)


def next_check_after_check(last_check_timestamp: int, *, check_interval_ms: int) -> int:
    """When a transaction checked at ``last_check_timestamp`` is next due: one
    transactionCheckInterval later."""
    return last_check_timestamp + check_interval_ms


def scan_lease_ttl_ms(*, check_interval_ms: int, scan_interval_ms: int) -> int:
    """How long a half queue's scan lease lasts unless renewed: half the check interval (at
    most 60 s, at least one scan interval), so a dead worker's queue is taken over within one
    check interval."""
    return max(scan_interval_ms, min(check_interval_ms // 2, 60_000))


def group_down_since(*, unreachable_since: int | None, unanswered_since: int | None) -> int | None:
    """Since when a producer group's back-checks have not got through (ms), or None when they
    do: the earlier of ``unreachable_since`` (its first undelivered check, or unpolled check
    request, since the last delivered one) and ``unanswered_since`` (its first check round with
    no answer in time, since the last answered one: its checks time out or are undelivered).
    The console's unreachable groups, ``halfmoon_producer_group_reachable`` and the
    ``group_unreachable`` alert all read this one rule."""
    found = [t for t in (unreachable_since, unanswered_since) if t is not None]
    return min(found) if found else None


def check_answered(outcome: str) -> bool:
    """True when a delivered check (journalled ``check_sent``) counts as answered: any outcome
    but TIMEOUT (an answer, a 202, a broken answer counted as INVALID, or a hand-out to a
    polling producer). The same rule as the group backoff's "answered in time"."""
    return outcome != CheckAnswer.TIMEOUT

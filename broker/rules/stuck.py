"""Why a transaction is still unresolved, in one line for the operator on call (pure: plain
values in, a sentence out; no database).

The causes follow RocketMQ's back-check (``TransactionalMessageCheckService``): a discarded
half message (``needDiscard`` after transactionCheckMax checks, ``needSkip`` past
fileReservedTime), a producer group whose checks cannot be delivered or time out, a producer
that keeps answering UNKNOW, or a half message still inside its check immunity.
"""

from __future__ import annotations

from broker.rules.states import CheckAnswer, DiscardReason, TransactionState

_ANSWER_REASONS = {
    CheckAnswer.UNKNOW: "producer answers UNKNOW",
    CheckAnswer.INVALID: "producer's check answer is invalid (counted as UNKNOW)",
    CheckAnswer.TIMEOUT: "check timed out (counted as UNKNOW)",
    CheckAnswer.ACCEPTED: "producer accepted the check (202) but has not ended it",
    CheckAnswer.POLLED: "check handed to a polling producer, no end yet",
    CheckAnswer.UNDELIVERED: "last check could not be delivered",
}


def stuck_reason(
    *,
    state: str,
    discard_reason: str,
    check_times: int,
    check_max: int,
    last_answer: str,
    next_check_timestamp: int | None,
    group_unreachable_since: int | None,
    group_backoff_until: int | None,
    now: int,
) -> str:
    """One line saying why the transaction has not ended.

    Args:
        state: ``TransactionState`` value (PREPARED or DISCARDED; others answer "").
        discard_reason: ``DiscardReason`` value for DISCARDED.
        check_times, check_max: checks delivered and ``HALFMOON_TRANSACTION_CHECK_MAX``.
        last_answer: the outcome of its latest check event (a ``CheckAnswer``), "" if none.
        next_check_timestamp: when it is due for its next check (ms), None if not scheduled.
        group_unreachable_since: the producer group's first undelivered check (ms) or None.
        group_backoff_until: no checks to the group before this time (ms) or None.
        now: the clock (ms).

    The most pressing cause comes first: discard, an unreachable group, a backed-off group,
    the last answer, then "waiting for the first check".
    """
    if state == TransactionState.DISCARDED:
        if discard_reason == DiscardReason.CHECK_MAX:
            return f"discarded: check_max ({check_times} of {check_max} checks, no end)"
        if discard_reason == DiscardReason.FILE_RESERVED_TIME:
            return "discarded: file_reserved_time (older than the half message retention)"
        return f"discarded: {discard_reason or 'unknown reason'}"
    if state != TransactionState.PREPARED:
        return ""
    if group_unreachable_since is not None:
        return "producer group unreachable (checks not delivered)"
    if group_backoff_until is not None and group_backoff_until > now:
        return "producer group backed off: its checks time out"
    if last_answer in _ANSWER_REASONS:
        return _ANSWER_REASONS[CheckAnswer(last_answer)]
    if check_times == 0:
        if next_check_timestamp is not None and next_check_timestamp > now:
            return "waiting for the first check (check immunity)"
        return "first check due, not sent yet"
    return "no check answer yet"

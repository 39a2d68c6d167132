"""The spellings of a transaction's state and end, and the one place they map to each other.

============  =================  ====================  ===============  ==========
end action    check answer       Resolution action     state            Op/journal
(api-v1 end)  (LocalTransaction  (Op message,          (Transaction)    outcome
              State)             TransactionEvent)
============  =================  ====================  ===============  ==========
commit        COMMIT_MESSAGE     COMMIT                COMMITTED        COMMIT
rollback      ROLLBACK_MESSAGE   ROLLBACK              ROLLED_BACK      ROLLBACK
unknown       UNKNOW (UNKNOWN)   -                     PREPARED         -
============  =================  ====================  ===============  ==========

Sources: RocketMQ ``LocalTransactionState`` (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW; the 5.x
gRPC API also says UNKNOWN), ``MessageSysFlag`` (TRANSACTION_COMMIT_TYPE / ROLLBACK_TYPE)."""

from __future__ import annotations

from typing import Literal

from broker.rules.choices import TextChoices

EndAction = Literal["commit", "rollback", "unknown"]
"""What a producer, a check answer or an operator asks for (api-v1 ``action``)."""

ResolvingAction = Literal["commit", "rollback"]
"""An end action that resolves a transaction (an operator may only choose these)."""

END_ACTIONS: tuple[EndAction, ...] = ("commit", "rollback", "unknown")
RESOLVING_ACTIONS: tuple[ResolvingAction, ...] = ("commit", "rollback")


class TransactionState(TextChoices):
    """A transaction's state (api-v1 ``state``)."""

    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"


RESOLVED_STATES: tuple[TransactionState, ...] = (
    TransactionState.COMMITTED,
    TransactionState.ROLLED_BACK,
)
"""The states a resolution (commit or rollback, and its Op message) leads to: the ended
states, from which no end, check or operator action moves a transaction again."""


class ResolvedBy(TextChoices):
    """Who ended a transaction (api-v1 ``resolved_by``)."""

    PRODUCER = "producer"
    CHECK = "check"
    OPERATOR = "operator"
    DISCARD = "discard"


class ResolutionAction(TextChoices):
    """A resolution as the Op log and the journals spell it (``Resolution.action``)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class CheckAnswer(TextChoices):
    """A back-check's outcome as journalled and counted (``halfmoon_checks_total{outcome}``):
    the producer's answer (RocketMQ LocalTransactionState) or what became of the check."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    ACCEPTED = "ACCEPTED"  # 202: the answer comes later as an end with from_transaction_check
    TIMEOUT = "TIMEOUT"
    INVALID = "INVALID"  # an answer that is none of the states: counted as UNKNOW
    POLLED = "POLLED"  # handed to a producer that polls check-requests
    UNDELIVERED = "UNDELIVERED"  # not sent (refused, connect timeout): not counted


class DiscardReason(TextChoices):
    """Why the scan discarded a transaction to TRANS_CHECK_MAX_TIME_TOPIC."""

    CHECK_MAX = "check_max"  # transactionCheckMax checks delivered (needDiscard)
    FILE_RESERVED_TIME = "file_reserved_time"  # older than fileReservedTime (needSkip)


_STATE_OF_ACTION: dict[ResolvingAction, TransactionState] = {
    "commit": TransactionState.COMMITTED,
    "rollback": TransactionState.ROLLED_BACK,
}
_RESOLUTION_OF_ACTION: dict[ResolvingAction, ResolutionAction] = {
    "commit": ResolutionAction.COMMIT,
    "rollback": ResolutionAction.ROLLBACK,
}
_ANSWER_OF_ACTION: dict[EndAction, CheckAnswer] = {
    "commit": CheckAnswer.COMMIT_MESSAGE,
    "rollback": CheckAnswer.ROLLBACK_MESSAGE,
    "unknown": CheckAnswer.UNKNOW,
}
# A producer's answer to a back-check: LocalTransactionState, and the 5.x spelling UNKNOWN.
_ACTION_OF_ANSWER: dict[str, EndAction] = {
    "COMMIT_MESSAGE": "commit",
    "ROLLBACK_MESSAGE": "rollback",
    "UNKNOW": "unknown",
    "UNKNOWN": "unknown",
}


def state_of_action(action: ResolvingAction) -> TransactionState:
    """``commit`` -> COMMITTED, ``rollback`` -> ROLLED_BACK.

    Raises:
        KeyError: any other action (``unknown`` resolves nothing).
    """
    return _STATE_OF_ACTION[action]


def resolution_of_action(action: ResolvingAction) -> ResolutionAction:
    """``commit`` -> COMMIT, ``rollback`` -> ROLLBACK (the Op log's and journals' spelling).

    Raises:
        KeyError: any other action.
    """
    return _RESOLUTION_OF_ACTION[action]


def answer_of_action(action: EndAction) -> CheckAnswer:
    """``commit`` -> COMMIT_MESSAGE, ``rollback`` -> ROLLBACK_MESSAGE, ``unknown`` -> UNKNOW."""
    return _ANSWER_OF_ACTION[action]


def action_of_answer(answer: str) -> EndAction | None:
    """A producer's check answer as an end action: COMMIT_MESSAGE -> ``commit``,
    ROLLBACK_MESSAGE -> ``rollback``, UNKNOW or UNKNOWN -> ``unknown``; None for anything else
    (the caller counts it as INVALID, i.e. UNKNOW). Exact, case-sensitive match."""
    return _ACTION_OF_ANSWER.get(answer)


def answer_label(answer: str) -> CheckAnswer | None:
    """The journal's label of a valid producer answer: UNKNOWN is journalled as UNKNOW (one
    label per meaning); None for an answer that is not a LocalTransactionState."""
    action = action_of_answer(answer)
    return None if action is None else answer_of_action(action)

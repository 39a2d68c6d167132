"""What one transaction's logs say its ``Transaction`` row and ``Resolution`` journal must be.

Pure: plain values in (the half message, the Op log's answer, the delivered message, the discard
copy, the journals), plain values out; the caller passes the setting values. RocketMQ reads its
logs this way (``TransactionalMessageServiceImpl``, ``EndTransactionProcessor``,
``AbstractTransactionalMessageCheckListener.resolveDiscardMsg``), strongest evidence first:

- a message delivered from the half message to its real topic: COMMITTED (consumers may already
  have it; nothing takes it back);
- else an Op message naming the half queue offset (or the ``Resolution`` journal row that an Op
  message will be flushed from): ROLLED_BACK (an Op message without a delivery is a rollback);
- else a copy on ``TRANS_CHECK_MAX_TIME_TOPIC`` stored after the current half message:
  DISCARDED (needDiscard / needSkip), with that copy's ``DISCARD_REASON``;
- else PREPARED, due at its first check (check immunity), at once after a resume
  (resumeCheckHalfMessage), or one transactionCheckInterval after its last check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker.rules.checks import check_immunity_ms, first_check_timestamp, next_check_after_check
from broker.rules.recovery_report import (
    DELIVERED_MESSAGE,
    RESOLUTION_HALF_OFFSET,
    Difference,
)
from broker.rules.states import (
    RESOLVED_STATES,
    RESOLVING_ACTIONS,
    ResolutionAction,
    ResolvedBy,
    TransactionState,
    resolution_of_action,
    state_of_action,
)

RESOLVERS = (ResolvedBy.PRODUCER, ResolvedBy.CHECK, ResolvedBy.OPERATOR)
"""Who may resolve (commit or roll back) a transaction; ``discard`` only discards."""


_RESOLUTION_OF_STATE = {
    state_of_action(action): resolution_of_action(action) for action in RESOLVING_ACTIONS
}


class HalfMessage(NamedTuple):
    """A half message on ``RMQ_SYS_TRANS_HALF_TOPIC`` as the rebuild reads it (no body).

    The last four are its properties as stored, None when absent: ``REAL_TOPIC``, ``REAL_QID``,
    ``PGROUP`` and ``CHECK_IMMUNITY_TIME_IN_SECONDS`` (strings). Times in ms since the epoch.
    """

    commit_log_offset: int
    queue_offset: int
    msg_id: str
    tags: str
    keys: str
    born_timestamp: int
    store_timestamp: int
    real_topic: str | None
    real_queue_id: str | None
    producer_group: str | None
    immunity_seconds: str | None


class Delivery(NamedTuple):
    """The message a commit delivered from a half message (its ``prepared_transaction_offset``
    is the half message's commit log offset): its real queue offset and store time (ms)."""

    queue_offset: int
    store_timestamp: int


class DiscardCopy(NamedTuple):
    """The newest copy of a transaction's half message on ``TRANS_CHECK_MAX_TIME_TOPIC``: its
    commit log offset, ``DISCARD_REASON`` ("" when absent) and store time (ms)."""

    commit_log_offset: int
    reason: str
    store_timestamp: int


class JournalledResolution(NamedTuple):
    """A ``Resolution`` row: the journal of a commit or rollback, written before the producer
    is answered and flushed into an Op message later (``op_commit_log_offset`` None until then).
    """

    id: int
    transaction_id: str
    half_queue_id: int
    half_queue_offset: int
    action: str
    resolved_by: str
    resolved_timestamp: int | None
    op_commit_log_offset: int | None


@dataclass
class CheckJournal:
    """What the check journal says about one transaction since its last resume: delivered
    checks (``check_times``), the last one's time and the resume's time (ms)."""

    check_times: int = 0
    last_check_timestamp: int | None = None
    resumed_timestamp: int | None = None


def check_journal_fold(events: Iterable[tuple[str, bool, int]]) -> dict[str, CheckJournal]:
    """Fold ``(transaction_id, is_resume, timestamp)`` events (``check_sent`` and ``resumed``),
    in insertion (id) order, into each transaction's ``CheckJournal``. A resume starts the count
    again (resumeCheckHalfMessage sets check times to 0). Insertion order, not timestamps: a test
    clock can make timestamps disagree, a row lock cannot."""
    journal: dict[str, CheckJournal] = {}
    for tid, is_resume, ts in events:
        if is_resume:
            journal[tid] = CheckJournal(resumed_timestamp=ts)
        else:
            entry = journal.setdefault(tid, CheckJournal())
            entry.check_times += 1
            entry.last_check_timestamp = ts
    return journal


class TransactionLogs(NamedTuple):
    """Everything the logs say about one transaction whose current half message is ``half``.

    ``op_named``: commit log offset of the first Op message naming the half queue offset, or
    None. ``op_verified``: the Op message the journal row points at was read again and does name
    the half queue offset (it was written after the Op log was indexed).
    """

    half_queue_id: int
    half: HalfMessage
    delivery: Delivery | None
    op_named: int | None
    discard: DiscardCopy | None
    journal: CheckJournal
    resolution: JournalledResolution | None
    op_verified: bool = False


@dataclass(frozen=True)
class DerivedTransaction:
    """A transaction as its logs say it is: ``columns`` holds every compared ``Transaction``
    field (``report.COMPARED_FIELDS``); the rest is scheduling, written only where a row is
    created or its state repaired. Times in ms since the epoch, durations in ms."""

    columns: dict[str, Any]
    resolved_timestamp: int | None
    check_immunity_ms: int
    next_check_timestamp: int | None
    last_check_timestamp: int | None

    @property
    def state(self) -> TransactionState:
        """The derived state."""
        return self.columns["state"]

    @property
    def resolved_by(self) -> str | None:
        """Who resolved or discarded it (None while PREPARED)."""
        return self.columns["resolved_by"]


def is_resolved(state: str) -> bool:
    """True for COMMITTED and ROLLED_BACK: a resolution (and an Op message) exists."""
    return state in RESOLVED_STATES


def resolution_action(state: str) -> ResolutionAction:
    """COMMITTED -> COMMIT, ROLLED_BACK -> ROLLBACK (``broker.rules.states``' mappings).

    Raises:
        KeyError: a state no resolution leads to.
    """
    return _RESOLUTION_OF_STATE[state]


def discarded_after(half: HalfMessage, discard: DiscardCopy | None) -> bool:
    """True when a discard copy (resolveDiscardMsg) was stored after ``half``: a resume
    re-appends the half message, and a discard of an older copy is then history."""
    return discard is not None and discard.commit_log_offset > half.commit_log_offset


def transaction_state(logs: TransactionLogs) -> TransactionState:
    """The state the logs say, strongest evidence first: delivered -> COMMITTED; named by an Op
    message or journalled as resolved, not delivered -> ROLLED_BACK; a newer discard copy ->
    DISCARDED; else PREPARED."""
    if logs.delivery is not None:
        return TransactionState.COMMITTED
    if logs.resolution is not None or logs.op_named is not None:
        return TransactionState.ROLLED_BACK
    if discarded_after(logs.half, logs.discard):
        return TransactionState.DISCARDED
    return TransactionState.PREPARED


def resolver(
    logs: TransactionLogs, state: str, row: Mapping[str, Any] | None
) -> tuple[str | None, int | None]:
    """Who ended the transaction and when (ms): the journal's ``Resolution``; with none, for a
    resolved transaction, the row's ``resolved_by`` and time when the row agrees on the state,
    else the producer at the delivery's store time (None if not delivered); the discard copy's
    store time for DISCARDED; (None, None) while PREPARED. ``row`` is the stored
    ``Transaction`` row (``state``, ``resolved_by``, ``resolved_timestamp``) or None."""
    if logs.resolution is not None:
        return logs.resolution.resolved_by, logs.resolution.resolved_timestamp
    if is_resolved(state):
        if row is not None and row["state"] == state and row["resolved_by"] in RESOLVERS:
            return row["resolved_by"], row["resolved_timestamp"]
        return ResolvedBy.PRODUCER, logs.delivery.store_timestamp if logs.delivery else None
    if state == TransactionState.DISCARDED and logs.discard is not None:
        return ResolvedBy.DISCARD, logs.discard.store_timestamp
    return None, None


def immunity_seconds(value: str | None) -> int | None:
    """A half message's ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property as an integer; None when
    absent, empty or not an integer (transactionTimeOut alone applies then, as RocketMQ's
    ``getCheckImmunityTime`` on a NumberFormatException)."""
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def real_queue_id(value: str | None) -> int:
    """A half message's ``REAL_QID`` property as an integer (0 when absent or not one)."""
    with contextlib.suppress(ValueError):
        return int(value or 0)
    return 0


def next_check_timestamp(
    logs: TransactionLogs, state: str, *, transaction_timeout_ms: int, check_interval_ms: int
) -> int | None:
    """When a PREPARED transaction is next due for a back-check (ms), None otherwise: one
    transactionCheckInterval after its last check; at once after a resume (its time); else at
    its first check (born time plus check immunity)."""
    if state != TransactionState.PREPARED:
        return None
    journal = logs.journal
    if journal.last_check_timestamp is not None:
        return next_check_after_check(
            journal.last_check_timestamp, check_interval_ms=check_interval_ms
        )
    if journal.resumed_timestamp is not None:
        return journal.resumed_timestamp
    return first_check_timestamp(
        born_timestamp=logs.half.born_timestamp,
        transaction_timeout_ms=transaction_timeout_ms,
        immunity_seconds=immunity_seconds(logs.half.immunity_seconds),
    )


def journal_conflict(logs: TransactionLogs) -> Difference | None:
    """A contradiction between the ``Resolution`` journal and the commit log that the rebuild
    leaves to an operator (``repairable`` False), or None: a COMMIT journalled with nothing
    delivered (repairing it would invent or destroy a delivery), or a journal row naming another
    half queue offset than the current half message's."""
    journalled, half = logs.resolution, logs.half
    if journalled is None:
        return None
    if journalled.action == ResolutionAction.COMMIT and logs.delivery is None:
        return Difference(
            half.msg_id, DELIVERED_MESSAGE, None, "COMMIT journalled, none delivered", False
        )
    if (journalled.half_queue_id, journalled.half_queue_offset) != (
        logs.half_queue_id,
        half.queue_offset,
    ):
        return Difference(
            half.msg_id,
            RESOLUTION_HALF_OFFSET,
            [journalled.half_queue_id, journalled.half_queue_offset],
            [logs.half_queue_id, half.queue_offset],
            False,
        )
    return None


def transaction_derive(
    logs: TransactionLogs,
    row: Mapping[str, Any] | None,
    *,
    transaction_timeout_ms: int,
    check_interval_ms: int,
) -> DerivedTransaction:
    """The transaction as ``logs`` say it is. ``row`` (the stored row, or None) is consulted
    only for who resolved a transaction whose journal row is missing (``resolver``).
    ``transaction_timeout_ms`` and ``check_interval_ms``: the current settings (ms)."""
    half = logs.half
    state = transaction_state(logs)
    resolved_by, resolved_ts = resolver(logs, state, row)
    columns: dict[str, Any] = {
        "producer_group": half.producer_group or "",
        "topic": half.real_topic or "",
        "queue_id": real_queue_id(half.real_queue_id),
        "tags": half.tags,
        "keys": half.keys,
        "half_queue_id": logs.half_queue_id,
        "half_queue_offset": half.queue_offset,
        "half_commit_log_offset": half.commit_log_offset,
        "born_timestamp": half.born_timestamp,
        "state": state,
        "check_times": logs.journal.check_times,
        "resolved_by": resolved_by,
        "queue_offset": logs.delivery.queue_offset if logs.delivery else None,
        "discard_reason": logs.discard.reason
        if state == TransactionState.DISCARDED and logs.discard
        else "",
    }
    return DerivedTransaction(
        columns=columns,
        resolved_timestamp=resolved_ts,
        check_immunity_ms=check_immunity_ms(
            transaction_timeout_ms=transaction_timeout_ms,
            immunity_seconds=immunity_seconds(half.immunity_seconds),
        ),
        next_check_timestamp=next_check_timestamp(
            logs,
            state,
            transaction_timeout_ms=transaction_timeout_ms,
            check_interval_ms=check_interval_ms,
        ),
        last_check_timestamp=logs.journal.last_check_timestamp,
    )


def journalled_op_offset(logs: TransactionLogs) -> int | None:
    """The Op message a resolved transaction's ``Resolution`` should point at: the one it
    points at if that Op message names the half queue offset (the Op index's first, or
    ``op_verified``); else the first Op message naming it, or None (not flushed yet: ``op_flush``
    writes one)."""
    stored = logs.resolution.op_commit_log_offset if logs.resolution else None
    if stored is not None and (stored == logs.op_named or logs.op_verified):
        return stored
    return logs.op_named

"""The logs of one chunk of a half queue, gathered per transaction: which half messages are
current, and for those their stored row, journals, delivery, discard copy and Op log entry.

Each log is read only where it can change the answer: a newer half copy only for a transaction
resumed or whose row does not point at this half message; journal rows outside the chunk's
offset range only for a transaction something says is resolved; discard copies only for a
transaction nothing resolves. About seven indexed queries per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.rules.recovery import (
    CheckJournal,
    Delivery,
    HalfMessage,
    JournalledResolution,
    TransactionLogs,
    is_resolved,
)
from broker.services.recovery.oplog import OpIndex, op_named_verify
from broker.services.recovery.reads import (
    check_journal_read,
    deliveries_read,
    discard_copies_read,
    newest_half_read,
    resolutions_read,
    stored_rows_read,
)


@dataclass
class ChunkLogs:
    """``rows``: the stored ``Transaction`` rows of the chunk's transactions (by id); ``logs``:
    the logs of each transaction whose current half message is in the chunk."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: list[TransactionLogs] = field(default_factory=list)


def chunk_logs_read(
    half_queue_id: int, halves: list[HalfMessage], ops: OpIndex, *, lock: bool
) -> ChunkLogs:
    """Read the logs of the half messages ``halves`` (consecutive, by queue offset) of
    ``half_queue_id``. With ``lock`` the ``Transaction`` and ``Resolution`` rows are locked
    first, then the logs read: every writer (end, check, discard, resume, Op flush) locks the
    same rows before writing their logs. Call inside a database transaction."""
    wanted = {h.msg_id for h in halves}
    span = (halves[0].queue_offset, halves[-1].queue_offset)
    rows = stored_rows_read(half_queue_id, span, wanted, lock=lock)
    journal = check_journal_read(sorted(wanted))
    current = _current(halves, rows, journal)
    if not current:
        return ChunkLogs(rows=rows)
    delivered = deliveries_read({h.commit_log_offset for h in current})
    resolutions = resolutions_read(
        half_queue_id,
        span,
        wanted,
        _maybe_resolved(current, rows, delivered, ops),
        lock=lock,
    )
    unresolved = [
        h.msg_id
        for h in current
        if h.commit_log_offset not in delivered
        and h.msg_id not in resolutions
        and ops.get(h.queue_offset) is None
    ]
    discards = discard_copies_read(unresolved) if unresolved else {}
    verified = op_named_verify(half_queue_id, _op_claims(half_queue_id, resolutions, ops))
    logs = [
        TransactionLogs(
            half_queue_id=half_queue_id,
            half=h,
            delivery=delivered.get(h.commit_log_offset),
            op_named=ops.get(h.queue_offset),
            discard=discards.get(h.msg_id),
            journal=journal.get(h.msg_id) or CheckJournal(),
            resolution=resolutions.get(h.msg_id),
            op_verified=h.queue_offset in verified,
        )
        for h in current
    ]
    return ChunkLogs(rows=rows, logs=logs)


def _current(
    halves: list[HalfMessage],
    rows: dict[str, dict[str, Any]],
    journal: dict[str, CheckJournal],
) -> list[HalfMessage]:
    """The half messages that are their transaction's current one. A resumed transaction has
    several and the newest is current; only a half message with a resume in its journal, or
    that its row does not point at (missing or wrong), needs a look for a newer copy."""
    unsure = [
        h.msg_id
        for h in halves
        if h.msg_id not in rows
        or rows[h.msg_id]["half_commit_log_offset"] != h.commit_log_offset
        or (h.msg_id in journal and journal[h.msg_id].resumed_timestamp is not None)
    ]
    newest = newest_half_read(unsure) if unsure else {}
    return [h for h in halves if newest.get(h.msg_id, h.commit_log_offset) == h.commit_log_offset]


def _maybe_resolved(
    current: list[HalfMessage],
    rows: dict[str, dict[str, Any]],
    delivered: dict[int, Delivery],
    ops: OpIndex,
) -> list[str]:
    """The transactions whose journal row is looked for outside the chunk's offset range too:
    those the logs or the row say are resolved."""
    return [
        h.msg_id
        for h in current
        if h.commit_log_offset in delivered
        or ops.get(h.queue_offset) is not None
        or (h.msg_id in rows and is_resolved(rows[h.msg_id]["state"]))
    ]


def _op_claims(
    half_queue_id: int, resolutions: dict[str, JournalledResolution], ops: OpIndex
) -> dict[int, int]:
    """{half queue offset: Op commit log offset} of journal rows pointing at an Op message the
    index does not credit with their offset (written after the index was read, or wrong): those
    Op messages are read again."""
    return {
        r.half_queue_offset: r.op_commit_log_offset
        for r in resolutions.values()
        if r.op_commit_log_offset is not None
        and r.half_queue_id == half_queue_id
        and ops.get(r.half_queue_offset) != r.op_commit_log_offset
    }

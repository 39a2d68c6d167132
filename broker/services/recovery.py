"""Rebuilding the derived transaction state from the commit log (seed 003: the transaction
state table rebuilt from the redo log after an abnormal shutdown).

What the logs say about a transaction, newest evidence winning:
- its half messages on ``RMQ_SYS_TRANS_HALF_TOPIC`` (the newest one is current: a resumed
  transaction is re-appended, as RocketMQ's ``resumeCheckHalfMessage`` does);
- the resolution journal (``Resolution`` rows, durable before a producer is answered) and the
  Op messages on ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` naming the current half queue offset;
- the delivered copy on its real topic (``prepared_transaction_offset``), which makes a commit;
- a copy on ``TRANS_CHECK_MAX_TIME_TOPIC`` stored after the current half message: a discard;
- the check journal (``TransactionEvent`` check_sent since the last resume): ``check_times``.

``transactions_rebuild`` compares that with the ``Transaction`` rows, reports every difference
and (unless ``dry_run``) rewrites the rows to match the logs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import transaction

from broker.conf import setting
from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from broker.models import (
    Message,
    Resolution,
    ResolvedBy,
    Transaction,
    TransactionEvent,
    TransactionState,
)

logger = logging.getLogger("halfmoon.recovery")

# Fields a rebuild compares; next_check_timestamp is scheduling, not state, and is only
# recomputed where it is missing or contradicts the state.
COMPARED_FIELDS = (
    "producer_group",
    "topic",
    "queue_id",
    "tags",
    "keys",
    "half_queue_id",
    "half_queue_offset",
    "half_commit_log_offset",
    "check_immunity_ms",
    "born_timestamp",
    "state",
    "check_times",
    "resolved_by",
    "queue_offset",
    "discard_reason",
)


@dataclass
class Difference:
    """One way a stored row differs from the logs: ``field`` is a column name, ``missing``
    (no row for a transaction the logs have) or ``extra`` (a row without a half message)."""

    transaction_id: str
    field: str
    stored: Any
    derived: Any


@dataclass
class RebuildReport:
    """The outcome of a rebuild: how much was read and every difference found."""

    half_messages: int = 0
    op_messages: int = 0
    transactions: int = 0
    differences: list[Difference] = field(default_factory=list)
    applied: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "differences": [asdict(d) for d in self.differences]}


def parse_op_body(body: bytes) -> list[int]:
    """The half queue offsets an Op message names: ``b"12,13,14,"`` -> [12, 13, 14] (RIP-50)."""
    return [int(part) for part in bytes(body).decode("ascii").split(",") if part.strip()]


def _derive(half_queue_id: int) -> tuple[dict[str, dict[str, Any]], int, int, dict[int, int]]:
    """Derived rows of one half queue, keyed by transaction id; also counts read and the
    Op log's {half offset: Op commit log offset}."""
    timeout_ms = setting("HALFMOON_TRANSACTION_TIMEOUT_MS")
    interval = setting("HALFMOON_TRANSACTION_CHECK_INTERVAL_MS")
    halves: dict[str, dict[str, Any]] = {}
    half_count = 0
    for row in (
        Message.objects.filter(topic=HALF_TOPIC, queue_id=half_queue_id)
        .order_by("commit_log_offset")
        .values(
            "commit_log_offset",
            "queue_offset",
            "msg_id",
            "tags",
            "keys",
            "properties",
            "born_timestamp",
            "store_timestamp",
        )
        .iterator(chunk_size=5000)
    ):
        half_count += 1
        halves[row["msg_id"]] = row  # the newest half message of a transaction is current

    op_offsets: dict[int, int] = {}
    op_count = 0
    for body, clo in (
        Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=half_queue_id)
        .order_by("commit_log_offset")
        .values_list("body", "commit_log_offset")
        .iterator(chunk_size=5000)
    ):
        op_count += 1
        for offset in parse_op_body(body):
            op_offsets.setdefault(offset, clo)

    journal = {
        r["half_queue_offset"]: r
        for r in Resolution.objects.filter(half_queue_id=half_queue_id).values(
            "half_queue_offset", "action", "resolved_by", "resolved_timestamp", "transaction_id"
        )
    }
    half_clos = {h["commit_log_offset"] for h in halves.values()}
    delivered: dict[int, tuple[int, int]] = {}
    for pto, queue_offset, stored in (
        Message.objects.filter(prepared_transaction_offset__isnull=False)
        .values_list("prepared_transaction_offset", "queue_offset", "store_timestamp")
        .iterator(chunk_size=5000)
    ):
        if pto in half_clos:
            delivered[pto] = (queue_offset, stored)
    discards: dict[str, dict[str, Any]] = {}
    for row in (
        Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id__in=list(halves))
        .order_by("commit_log_offset")
        .values("msg_id", "commit_log_offset", "properties", "store_timestamp")
        .iterator(chunk_size=5000)
    ):
        discards[row["msg_id"]] = row

    checks: dict[str, list[int]] = defaultdict(list)
    for tid, kind, ts in (
        TransactionEvent.objects.filter(
            transaction_id__in=list(halves),
            kind__in=[TransactionEvent.Kind.CHECK_SENT, TransactionEvent.Kind.RESUMED],
        )
        .order_by("timestamp", "id")
        .values_list("transaction_id", "kind", "timestamp")
        .iterator(chunk_size=5000)
    ):
        if kind == TransactionEvent.Kind.RESUMED:
            checks[tid] = []
        else:
            checks[tid].append(ts)

    derived: dict[str, dict[str, Any]] = {}
    for tid, half in halves.items():
        props = half["properties"] or {}
        immunity = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        immunity_ms = max(timeout_ms, int(immunity) * 1000) if immunity else timeout_ms
        offset = half["queue_offset"]
        check_times = len(checks.get(tid, []))
        row: dict[str, Any] = {
            "transaction_id": tid,
            "producer_group": props.get(PROPERTY_PRODUCER_GROUP, ""),
            "topic": props.get(PROPERTY_REAL_TOPIC, ""),
            "queue_id": int(props.get(PROPERTY_REAL_QUEUE_ID, 0)),
            "tags": half["tags"],
            "keys": half["keys"],
            "half_queue_id": half_queue_id,
            "half_queue_offset": offset,
            "half_commit_log_offset": half["commit_log_offset"],
            "check_immunity_ms": immunity_ms,
            "born_timestamp": half["born_timestamp"],
            "check_times": check_times,
            "last_check_timestamp": checks[tid][-1] if check_times else None,
            "state": TransactionState.PREPARED,
            "resolved_by": None,
            "resolved_timestamp": None,
            "queue_offset": None,
            "discard_reason": "",
        }
        resolution = journal.get(offset)
        in_op_log = offset in op_offsets
        hit = delivered.get(half["commit_log_offset"])
        discard = discards.get(tid)
        if resolution is not None or in_op_log or hit is not None:
            committed = hit is not None or (
                resolution is not None and resolution["action"] == "COMMIT"
            )
            row["state"] = TransactionState.COMMITTED if committed else TransactionState.ROLLED_BACK
            row["resolved_by"] = resolution["resolved_by"] if resolution else ResolvedBy.PRODUCER
            row["resolved_timestamp"] = (
                resolution["resolved_timestamp"]
                if resolution
                else (hit[1] if hit else half["store_timestamp"])
            )
            row["queue_offset"] = hit[0] if hit else None
        elif discard is not None and discard["commit_log_offset"] > half["commit_log_offset"]:
            row["state"] = TransactionState.DISCARDED
            row["resolved_by"] = ResolvedBy.DISCARD
            row["resolved_timestamp"] = discard["store_timestamp"]
            row["discard_reason"] = (discard["properties"] or {}).get(PROPERTY_DISCARD_REASON, "")
        if row["state"] == TransactionState.PREPARED:
            last = row["last_check_timestamp"]
            row["next_check_timestamp"] = (
                last + interval if last is not None else row["born_timestamp"] + immunity_ms
            )
        else:
            row["next_check_timestamp"] = None
        derived[tid] = row
    return derived, half_count, op_count, op_offsets


def transactions_rebuild(*, dry_run: bool = False) -> RebuildReport:
    """Rebuild every ``Transaction`` row from the commit log and journals; return the report.

    With ``dry_run`` nothing is written. Otherwise each half queue is rewritten in its own
    database transaction: rows are created, corrected or removed to match the logs, and a
    resolution that the Op log names but the journal lacks is added to the journal. Meant for
    a stopped or quiet broker (after a crash); concurrent ends on the same queue would be
    serialised by the row locks but may be reported as differences.
    """
    report = RebuildReport()
    queues = set(
        Message.objects.filter(topic=HALF_TOPIC).values_list("queue_id", flat=True).distinct()
    ) | set(Transaction.objects.values_list("half_queue_id", flat=True).distinct())
    for half_queue_id in sorted(queues):
        with transaction.atomic():
            derived, halves, ops, op_offsets = _derive(half_queue_id)
            report.half_messages += halves
            report.op_messages += ops
            report.transactions += len(derived)
            stored = {
                t.transaction_id: t
                for t in Transaction.objects.select_for_update().filter(half_queue_id=half_queue_id)
            }
            diffs = _compare(stored, derived)
            report.differences.extend(diffs)
            if diffs and not dry_run:
                _apply(stored, derived, {d.transaction_id for d in diffs})
            if not dry_run:
                _journal_from_op_log(half_queue_id, derived, op_offsets)
    report.applied = not dry_run
    if report.differences:
        logger.warning("rebuild found %d differences", len(report.differences))
    return report


def _compare(
    stored: dict[str, Transaction], derived: dict[str, dict[str, Any]]
) -> list[Difference]:
    diffs: list[Difference] = []
    for tid, row in derived.items():
        tx = stored.get(tid)
        if tx is None:
            diffs.append(Difference(tid, "missing", None, row["state"]))
            continue
        for name in COMPARED_FIELDS:
            if getattr(tx, name) != row[name]:
                diffs.append(Difference(tid, name, getattr(tx, name), row[name]))
        if (tx.next_check_timestamp is None) != (row["next_check_timestamp"] is None):
            diffs.append(
                Difference(
                    tid,
                    "next_check_timestamp",
                    tx.next_check_timestamp,
                    row["next_check_timestamp"],
                )
            )
    for tid, tx in stored.items():
        if tid not in derived:
            diffs.append(Difference(tid, "extra", tx.state, None))
    return diffs


def _apply(
    stored: dict[str, Transaction], derived: dict[str, dict[str, Any]], changed: set[str]
) -> None:
    for tid in changed:
        row = derived.get(tid)
        tx = stored.get(tid)
        if row is None:
            if tx is not None and not Resolution.objects.filter(transaction_id=tid).exists():
                tx.delete()
            continue
        values = {k: v for k, v in row.items() if k != "transaction_id"}
        if (
            tx is not None
            and tx.next_check_timestamp is not None
            and row["next_check_timestamp"] is not None
        ):
            values["next_check_timestamp"] = tx.next_check_timestamp  # keep the live schedule
        Transaction.objects.update_or_create(transaction_id=tid, defaults=values)


def _journal_from_op_log(
    half_queue_id: int, derived: dict[str, dict[str, Any]], op_offsets: dict[int, int]
) -> None:
    """Add journal entries for resolutions the Op log names but the journal lacks."""
    have = set(
        Resolution.objects.filter(half_queue_id=half_queue_id).values_list(
            "half_queue_offset", flat=True
        )
    )
    for row in derived.values():
        offset = row["half_queue_offset"]
        if (
            offset in op_offsets
            and offset not in have
            and row["state"] in ("COMMITTED", "ROLLED_BACK")
        ):
            Resolution.objects.create(
                transaction_id=row["transaction_id"],
                half_queue_id=half_queue_id,
                half_queue_offset=offset,
                action="COMMIT" if row["state"] == "COMMITTED" else "ROLLBACK",
                resolved_by=row["resolved_by"],
                reason="rebuilt from the Op log",
                resolved_timestamp=row["resolved_timestamp"],
                op_commit_log_offset=op_offsets[offset],
            )

"""Rebuilding the derived transaction state from the commit log (seed 003: RocketMQ 3.1's
``TransactionStateService.recreateStateTable`` rebuilds the transaction state table from its
redo log after an abnormal shutdown).

Halfmoon keeps one ``Transaction`` row per transaction so that a scan finds due checks with an
index read. Every fact in that row follows from append-only records, and ``transactions_rebuild``
recomputes it from them, reports each difference and (unless ``dry_run``) rewrites the rows.

What is authoritative, strongest first (the rebuild never rewrites a message):

1. **The commit log** (``Message``), append-only and written in the same database transaction
   as the rows it explains:
   - the newest half message of a msg_id on ``RMQ_SYS_TRANS_HALF_TOPIC`` is the transaction's
     current half message (a resume re-appends a copy, as RocketMQ's
     ``resumeCheckHalfMessage``); it fixes the producer group, real topic and queue
     (``PGROUP``, ``REAL_TOPIC``, ``REAL_QID``), tags, keys, half queue offset, commit log
     offset and born time;
   - a message delivered from it (``prepared_transaction_offset`` = its commit log offset)
     makes the transaction COMMITTED, whatever a row or the journal says: consumers may
     already have it, and it is never taken back;
   - an Op message on ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` naming its half queue offset (RIP-50
     bodies ``12,13,14,``) makes it resolved: COMMITTED with a delivered message, else
     ROLLED_BACK (RocketMQ's rule: an Op message without a delivery is a rollback);
   - a copy on ``TRANS_CHECK_MAX_TIME_TOPIC`` stored after the current half message, with no
     resolution, makes it DISCARDED with that copy's ``DISCARD_REASON``.
2. **The journals**, append-only rows written in the same database transaction as the state
   change: ``Resolution`` (action, ``resolved_by``, time; durable before a producer is
   answered, flushed into Op messages later) and ``TransactionEvent``. ``check_times`` is the
   number of ``check_sent`` events after the last ``resumed`` one, in insertion (id) order:
   a test clock can make timestamps disagree, a row lock cannot.
3. **The Transaction row** is derived and gives way to both. Only scheduling is kept from it
   (``next_check_timestamp`` of a PREPARED row, ``undelivered_checks``, ``check_immunity_ms``,
   which depends on ``HALFMOON_TRANSACTION_TIMEOUT_MS`` at prepare time and is not compared).

Where the journal and the commit log disagree, the rebuild repairs the journal to match the
log, except where doing so would invent or destroy a delivery:
- no ``Resolution`` for a transaction the Op log or a delivery resolves: one is written (its
  ``resolved_by`` taken from the row if the row agrees on the state, else ``producer``);
- ``op_commit_log_offset`` set but that Op message does not name the half offset: it is set to
  the Op message that does, or to NULL, so that ``op_flush`` writes it (again);
- ``op_commit_log_offset`` NULL although an Op message names the offset: set to that message,
  so the flusher does not name it twice;
- ``ROLLBACK`` journalled but the message was delivered: the journal says ``COMMIT``;
- ``COMMIT`` journalled but nothing delivered: reported, **not repaired** (the rebuild reads
  no message bodies and never delivers; turning it into a rollback would contradict what the
  producer was told). An operator decides;
- a ``Resolution`` naming another half offset than the current half message's: reported,
  not repaired;
- a row (or a journal row) for a transaction with no half message: the row is deleted if it
  has no ``Resolution``; with one, reported and not repaired.

A half message is superseded when a newer copy of its msg_id exists. The rebuild looks for one
only where the check journal has a ``resumed`` event or the row does not point at that half
message, so missing a copy would take both the row and the journal to be wrong. An operator's
resolution of a DISCARDED transaction clears ``discard_reason``: it is derived only for
DISCARDED transactions.

Cost: per half queue, the Op queue once (8 bytes of memory per half queue offset, see
``_OpIndex``), then the half queue in chunks of ``CHUNK_SIZE`` by queue offset (its unique
index), each chunk about seven indexed queries (range scans by half queue offset and commit
log offset, and index probes with the chunk's ids); then one anti-join for rows without a half
message.
No message body is read except the Op messages'. A dry run reads one snapshot (one REPEATABLE
READ, READ ONLY transaction on PostgreSQL), so it can run beside a live broker without
reporting transitions in flight. A repair locks each chunk's ``Transaction`` and ``Resolution``
rows before reading their logs, so it serialises with ends, checks, resumes and Op flushes
(which all lock those rows first); it is still meant for a quiet broker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import BooleanField, Exists, F, Func, OuterRef, Q, QuerySet, Value
from django.db.models.fields.json import KT

from broker.conf import conf
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
    ConsumeQueue,
    Message,
    Resolution,
    ResolvedBy,
    Transaction,
    TransactionEvent,
    TransactionState,
    now_ms,
)

logger = logging.getLogger("halfmoon.recovery")

CHUNK_SIZE = 2000  # half messages per step: 7 queries, ~2 MB of rows (100k: ~50 steps)
OP_READ_CHUNK = 2000  # Op messages fetched at a time (bodies of at most HALFMOON_OP_MSG_MAX_SIZE)

# Transaction fields compared with the logs. Scheduling (next_check_timestamp: only whether it
# is set; last_check_timestamp, undelivered_checks, check_immunity_ms, resolved_timestamp) is
# not state and is only rewritten where a row is created or its state repaired.
COMPARED_FIELDS = (
    "producer_group",
    "topic",
    "queue_id",
    "tags",
    "keys",
    "half_queue_id",
    "half_queue_offset",
    "half_commit_log_offset",
    "born_timestamp",
    "state",
    "check_times",
    "resolved_by",
    "queue_offset",
    "discard_reason",
)

# Difference.field values that are not Transaction columns.
MISSING = "missing"  # the logs have a transaction, no row does
EXTRA = "extra"  # a row for a transaction with no half message
RESOLUTION = "resolution"  # the Resolution journal row is missing
RESOLUTION_ACTION = "resolution.action"
RESOLUTION_OP_OFFSET = "resolution.op_commit_log_offset"
RESOLUTION_HALF_OFFSET = "resolution.half_queue_offset"  # not repaired
DELIVERED_MESSAGE = "delivered_message"  # COMMIT journalled, nothing delivered: not repaired

_RESOLVERS = (ResolvedBy.PRODUCER, ResolvedBy.CHECK, ResolvedBy.OPERATOR)


@dataclass
class Difference:
    """One way the stored rows differ from the logs.

    ``field`` is a ``Transaction`` column, or one of ``missing`` (no row for a transaction the
    logs have), ``extra`` (a row without a half message), ``resolution`` (no journal row for a
    resolved transaction), ``resolution.action``, ``resolution.op_commit_log_offset``,
    ``resolution.half_queue_offset`` or ``delivered_message``. ``stored`` is what the rows say,
    ``derived`` what the logs say. ``repairable`` is False for what the rebuild leaves to an
    operator (it is reported, and reported again by the next run).
    """

    transaction_id: str
    field: str
    stored: Any
    derived: Any
    repairable: bool = True


@dataclass
class RebuildReport:
    """The outcome of a rebuild: how much was read and every difference found."""

    half_messages: int = 0
    op_messages: int = 0
    transactions: int = 0
    differences: list[Difference] = field(default_factory=list)
    dry_run: bool = True
    applied: bool = False
    """True when repairs were written (not a dry run), even if there were none to write."""
    repaired: int = 0
    """Differences repaired (0 in a dry run)."""
    elapsed_ms: int = 0

    @property
    def unrepairable(self) -> list[Difference]:
        return [d for d in self.differences if not d.repairable]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unrepairable": len(self.unrepairable)}


def parse_op_body(body: bytes | memoryview) -> list[int]:
    """The half queue offsets an Op message names: ``b"12,13,14,"`` -> [12, 13, 14] (RIP-50).
    Parts that are not integers are skipped (and logged)."""
    offsets = []
    for part in bytes(body).split(b","):
        part = part.strip()
        if not part:
            continue
        try:
            offsets.append(int(part))
        except ValueError:
            logger.warning("Op message part %r is not a half queue offset", part[:40])
    return offsets


class _OpIndex:
    """The Op log of one half queue: {half queue offset: commit log offset of the first Op
    message naming it}, as an array of 8-byte integers indexed by half queue offset (-1: not
    named). 8 bytes per half queue offset: 1,000,000 half messages take 8 MB.

    Offsets at or past ``bound`` (the half queue's next offset when the Op log was read) name
    no half message read so far and are ignored: ``_op_named_verify`` reads such an Op message
    again if a journal row points at it."""

    def __init__(self, bound: int):
        self.bound = bound
        self._first = array("q", [-1]) * bound
        self.out_of_range = 0

    def add(self, offset: int, op_commit_log_offset: int) -> None:
        if not 0 <= offset < self.bound:
            self.out_of_range += 1
            return
        if self._first[offset] == -1:
            self._first[offset] = op_commit_log_offset

    def get(self, offset: int) -> int | None:
        if 0 <= offset < self.bound and self._first[offset] != -1:
            return self._first[offset]
        return None


class _Half(NamedTuple):
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


_HALF_COLUMNS = {
    "real_topic": KT(f"properties__{PROPERTY_REAL_TOPIC}"),
    "real_queue_id": KT(f"properties__{PROPERTY_REAL_QUEUE_ID}"),
    "producer_group_prop": KT(f"properties__{PROPERTY_PRODUCER_GROUP}"),
    "immunity_seconds": KT(f"properties__{PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS}"),
}


@dataclass
class _Journal:
    """What the check journal says about one transaction since its last resume."""

    check_times: int = 0
    last_check_timestamp: int | None = None
    resumed_timestamp: int | None = None


def transactions_rebuild(*, dry_run: bool = False, chunk_size: int = CHUNK_SIZE) -> RebuildReport:
    """Rebuild every ``Transaction`` row (and the ``Resolution`` journal where the commit log
    says more) from the commit log and journals; return the report.

    With ``dry_run`` nothing is written and everything is read from one snapshot. Otherwise
    each chunk of a half queue is compared and repaired in its own database transaction, its
    rows locked first. See the module docstring for what is authoritative.
    """
    started = time.monotonic()
    report = RebuildReport(dry_run=dry_run)
    if dry_run:
        with transaction.atomic():
            _snapshot_begin()
            _rebuild(report, apply=False, chunk_size=chunk_size)
    else:
        _rebuild(report, apply=True, chunk_size=chunk_size)
        report.applied = True
    report.elapsed_ms = int((time.monotonic() - started) * 1000)
    if report.differences:
        logger.warning(
            "rebuild found %d differences (%d not repairable)%s",
            len(report.differences),
            len(report.unrepairable),
            "" if dry_run else f", repaired {report.repaired}",
        )
    logger.info(
        "rebuild read %d half and %d Op messages, %d transactions, in %d ms",
        report.half_messages,
        report.op_messages,
        report.transactions,
        report.elapsed_ms,
    )
    return report


def _snapshot_begin() -> None:
    """On PostgreSQL, make the just-opened outermost transaction one REPEATABLE READ, READ ONLY
    snapshot. Inside an enclosing transaction (tests) it stays as it is."""
    if connection.vendor != "postgresql":
        return
    if connection.savepoint_ids:  # nested in an enclosing atomic(): too late to change
        return
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def _rebuild(report: RebuildReport, *, apply: bool, chunk_size: int) -> None:
    queues = sorted(
        ConsumeQueue.objects.filter(topic=HALF_TOPIC).values_list("queue_id", "max_offset")
    )
    for half_queue_id, max_offset in queues:
        ops = _op_index_read(half_queue_id, max_offset, report)
        next_offset = 0
        while True:
            halves = [
                _Half(*row)
                for row in Message.objects.filter(
                    topic=HALF_TOPIC, queue_id=half_queue_id, queue_offset__gte=next_offset
                )
                .order_by("queue_offset")
                .annotate(**_HALF_COLUMNS)
                .values_list(
                    "commit_log_offset",
                    "queue_offset",
                    "msg_id",
                    "tags",
                    "keys",
                    "born_timestamp",
                    "store_timestamp",
                    *_HALF_COLUMNS,
                )[:chunk_size]
            ]
            if not halves:
                break
            report.half_messages += len(halves)
            next_offset = halves[-1].queue_offset + 1
            _rebuild_chunk(half_queue_id, halves, ops, report, apply=apply)
            if len(halves) < chunk_size:
                break
    _extra_rows(report, apply=apply)


def _op_index_read(half_queue_id: int, bound: int, report: RebuildReport) -> _OpIndex:
    ops = _OpIndex(bound)
    for body, clo in (
        Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=half_queue_id)
        .order_by("queue_offset")
        .values_list("body", "commit_log_offset")
        .iterator(chunk_size=OP_READ_CHUNK)
    ):
        report.op_messages += 1
        for offset in parse_op_body(body):
            ops.add(offset, clo)
    if ops.out_of_range:
        logger.warning(
            "Op queue %d names %d offsets past half queue offset %d",
            half_queue_id,
            ops.out_of_range,
            bound,
        )
    return ops


def _in(field_name: str, values: Iterable[Any]) -> Q:
    """``field_name IN values``, as index probes. On PostgreSQL one array parameter
    (``= ANY(%s)``), not one parameter per value, which psycopg splits slowly. Explicit values,
    never a subquery: joined on a subquery the planner may hash a whole table per chunk."""
    values = list(values)
    if connection.vendor != "postgresql":
        return Q(**{f"{field_name}__in": values})
    return Q(_AnyOf(F(field_name), Value(values)))


class _AnyOf(Func):
    """``<field> = ANY(<array>)``."""

    template = "%(expressions)s)"
    arg_joiner = " = ANY("
    output_field = BooleanField()


def _journal_read(ids: list[str]) -> dict[str, _Journal]:
    """The check journal of the transactions ``ids``, in insertion order."""
    journal: dict[str, _Journal] = {}
    for tid, kind, ts in (
        TransactionEvent.objects.filter(
            _in("transaction_id", ids),
            kind__in=[TransactionEvent.Kind.CHECK_SENT, TransactionEvent.Kind.RESUMED],
        )
        .order_by("id")
        .values_list("transaction_id", "kind", "timestamp")
    ):
        if kind == TransactionEvent.Kind.RESUMED:
            journal[tid] = _Journal(resumed_timestamp=ts)
        else:
            entry = journal.setdefault(tid, _Journal())
            entry.check_times += 1
            entry.last_check_timestamp = ts
    return journal


def _op_named_verify(half_queue_id: int, claims: dict[int, int]) -> set[int]:
    """Of ``claims`` ({half queue offset: Op commit log offset a journal row points at}), the
    half offsets whose Op message exists on this Op queue and names them."""
    if not claims:
        return set()
    bodies = dict(
        Message.objects.filter(
            pk__in=set(claims.values()), topic=OP_HALF_TOPIC, queue_id=half_queue_id
        ).values_list("commit_log_offset", "body")
    )
    named = {clo: set(parse_op_body(body)) for clo, body in bodies.items()}
    return {offset for offset, clo in claims.items() if offset in named.get(clo, ())}


_STORED_FIELDS = (
    "transaction_id",
    *COMPARED_FIELDS,
    "next_check_timestamp",
    "resolved_timestamp",
)
_RESOLUTION_FIELDS = (
    "id",
    "transaction_id",
    "half_queue_id",
    "half_queue_offset",
    "action",
    "resolved_by",
    "resolved_timestamp",
    "op_commit_log_offset",
)


def _by_half_offset(
    qs: QuerySet,
    half_queue_id: int,
    lo: int,
    hi: int,
    wanted: set[str],
    also: Iterable[str],
    lock: bool,
) -> dict[str, dict[str, Any]]:
    """Rows of ``qs`` (``values()`` of a model with ``transaction_id``, ``half_queue_id`` and
    ``half_queue_offset``) for the transactions ``wanted``: read by the range of their half
    queue offsets (an index range scan), then by id for those of ``also`` not found there (a row
    at a wrong offset)."""
    if lock:
        qs = qs.select_for_update()
    found = {
        row["transaction_id"]: row
        for row in qs.filter(
            half_queue_id=half_queue_id, half_queue_offset__gte=lo, half_queue_offset__lte=hi
        ).order_by("half_queue_offset")
        if row["transaction_id"] in wanted
    }
    rest = sorted(set(also) - found.keys())
    if rest:
        found.update(
            (row["transaction_id"], row)
            for row in qs.filter(_in("transaction_id", rest)).order_by("transaction_id")
        )
    return found


def _rebuild_chunk(
    half_queue_id: int,
    halves: list[_Half],
    ops: _OpIndex,
    report: RebuildReport,
    *,
    apply: bool,
) -> None:
    wanted = {h.msg_id for h in halves}
    lo, hi = halves[0].queue_offset, halves[-1].queue_offset
    with transaction.atomic():
        # Lock first, then read the logs of these transactions: every writer (end, check,
        # discard, resume, Op flush) locks the same rows before writing their logs.
        stored = _by_half_offset(
            Transaction.objects.values(*_STORED_FIELDS),
            half_queue_id,
            lo,
            hi,
            wanted,
            wanted,
            apply,
        )
        journal = _journal_read(sorted(wanted))
        # A resumed transaction has several half messages and the newest is current. Only a
        # half with a resume in its journal, or that its row does not point at (a row missing
        # or wrong), needs a look for a newer copy.
        unsure = [
            h.msg_id
            for h in halves
            if h.msg_id not in stored
            or stored[h.msg_id]["half_commit_log_offset"] != h.commit_log_offset
            or (h.msg_id in journal and journal[h.msg_id].resumed_timestamp is not None)
        ]
        newest: dict[str, int] = {}
        if unsure:
            for mid, clo in Message.objects.filter(
                _in("msg_id", unsure), topic=HALF_TOPIC
            ).values_list("msg_id", "commit_log_offset"):
                newest[mid] = max(clo, newest.get(mid, -1))
        current = [
            h for h in halves if newest.get(h.msg_id, h.commit_log_offset) == h.commit_log_offset
        ]
        if not current:
            return
        report.transactions += len(current)

        # Deliveries by the range of the chunk's commit log offsets (an index range scan).
        clos = {h.commit_log_offset for h in current}
        delivered = {
            pto: (queue_offset, store_ts)
            for pto, queue_offset, store_ts in Message.objects.filter(
                prepared_transaction_offset__gte=min(clos),
                prepared_transaction_offset__lte=max(clos),
            ).values_list("prepared_transaction_offset", "queue_offset", "store_timestamp")
            if pto in clos
        }
        # Journal rows out of their range are looked for only where the logs or the row say
        # the transaction is resolved.
        resolutions = _by_half_offset(
            Resolution.objects.values(*_RESOLUTION_FIELDS),
            half_queue_id,
            lo,
            hi,
            wanted,
            (
                h.msg_id
                for h in current
                if h.commit_log_offset in delivered
                or ops.get(h.queue_offset) is not None
                or (
                    h.msg_id in stored
                    and stored[h.msg_id]["state"]
                    in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)
                )
            ),
            apply,
        )
        # A discard copy matters only to a transaction nothing resolves.
        unresolved = [
            h.msg_id
            for h in current
            if h.commit_log_offset not in delivered
            and h.msg_id not in resolutions
            and ops.get(h.queue_offset) is None
        ]
        discards: dict[str, tuple[int, str, int]] = {}
        if unresolved:
            for mid, clo, reason, store_ts in (
                Message.objects.filter(_in("msg_id", unresolved), topic=CHECK_MAX_TIME_TOPIC)
                .order_by("commit_log_offset")
                .annotate(reason=KT(f"properties__{PROPERTY_DISCARD_REASON}"))
                .values_list("msg_id", "commit_log_offset", "reason", "store_timestamp")
            ):
                discards[mid] = (clo, reason or "", store_ts)  # the newest copy wins
        # Journal rows pointing at an Op message the index does not credit with their offset
        # (written after the index was read, or wrong): read those Op messages again.
        claims = {
            r["half_queue_offset"]: r["op_commit_log_offset"]
            for r in resolutions.values()
            if r["op_commit_log_offset"] is not None
            and r["half_queue_id"] == half_queue_id
            and ops.get(r["half_queue_offset"]) != r["op_commit_log_offset"]
        }
        verified = _op_named_verify(half_queue_id, claims)

        plan = _ChunkPlan()
        for half in current:
            _compare_one(
                half_queue_id,
                half,
                stored.get(half.msg_id),
                resolutions.get(half.msg_id),
                delivered.get(half.commit_log_offset),
                discards.get(half.msg_id),
                journal.get(half.msg_id, _Journal()),
                ops,
                verified,
                plan,
            )
        if plan.op_timestamps_wanted:
            plan.op_timestamps = dict(
                Message.objects.filter(pk__in=plan.op_timestamps_wanted).values_list(
                    "commit_log_offset", "store_timestamp"
                )
            )
        report.differences.extend(plan.differences)
        if apply and plan.differences:
            report.repaired += plan.apply()


@dataclass
class _ChunkPlan:
    """Differences of one chunk and the writes that repair them."""

    differences: list[Difference] = field(default_factory=list)
    create: list[dict[str, Any]] = field(default_factory=list)
    update: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolution_create: list[dict[str, Any]] = field(default_factory=list)
    resolution_update: dict[int, dict[str, Any]] = field(default_factory=dict)
    op_timestamps_wanted: set[int] = field(default_factory=set)
    op_timestamps: dict[int, int] = field(default_factory=dict)

    def diff(self, tid: str, name: str, stored: Any, derived: Any, repairable: bool = True) -> None:
        self.differences.append(Difference(tid, name, _plain(stored), _plain(derived), repairable))

    def apply(self) -> int:
        """Write the repairs (inside the chunk's transaction); return differences repaired."""
        now = now_ms()
        if self.create:
            for row in self.create:
                if row["state"] != TransactionState.PREPARED and row["resolved_timestamp"] is None:
                    row["resolved_timestamp"] = now
            Transaction.objects.bulk_create([Transaction(**row) for row in self.create])
        for tid, values in self.update.items():
            if values.get("state") not in (None, TransactionState.PREPARED):
                values["resolved_timestamp"] = values.get("resolved_timestamp") or now
            Transaction.objects.filter(pk=tid).update(**values)
        if self.resolution_create:
            Resolution.objects.bulk_create(
                [
                    Resolution(
                        **{
                            **row,
                            "resolved_timestamp": row["resolved_timestamp"]
                            or self.op_timestamps.get(row["op_commit_log_offset"])
                            or now,
                        }
                    )
                    for row in self.resolution_create
                ]
            )
        for pk, values in self.resolution_update.items():
            Resolution.objects.filter(pk=pk).update(**values)
        return sum(d.repairable for d in self.differences)


def _plain(value: Any) -> Any:
    """Choices as their plain values, so reports print and serialise as the database has them."""
    return value.value if isinstance(value, Enum) else value


def _compare_one(
    half_queue_id: int,
    half: _Half,
    tx: dict[str, Any] | None,
    resolution: dict[str, Any] | None,
    delivery: tuple[int, int] | None,
    discard: tuple[int, str, int] | None,
    journal: _Journal,
    ops: _OpIndex,
    verified: set[int],
    plan: _ChunkPlan,
) -> None:
    """Derive one transaction from its logs, compare it with its rows and plan the repairs."""
    tid = half.msg_id
    offset = half.queue_offset
    op_named = ops.get(offset)
    if (
        resolution is not None
        and resolution["action"] == Resolution.Action.COMMIT
        and delivery is None
    ):
        plan.diff(tid, DELIVERED_MESSAGE, None, "COMMIT journalled, none delivered", False)
        return  # an operator decides; nothing else about it is trustworthy enough to rewrite
    if resolution is not None and (
        resolution["half_queue_id"] != half_queue_id or resolution["half_queue_offset"] != offset
    ):
        plan.diff(
            tid,
            RESOLUTION_HALF_OFFSET,
            [resolution["half_queue_id"], resolution["half_queue_offset"]],
            [half_queue_id, offset],
            False,
        )
        return

    # The state the logs say, newest evidence first.
    state = TransactionState.PREPARED
    if delivery is not None:
        state = TransactionState.COMMITTED
    elif resolution is not None or op_named is not None:
        state = TransactionState.ROLLED_BACK
    elif discard is not None and discard[0] > half.commit_log_offset:
        state = TransactionState.DISCARDED
    resolved = state in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)

    if resolution is not None:
        resolved_by: str | None = resolution["resolved_by"]
        resolved_ts: int | None = resolution["resolved_timestamp"]
    elif resolved:
        same = tx is not None and tx["state"] == state and tx["resolved_by"] in _RESOLVERS
        resolved_by = tx["resolved_by"] if same else ResolvedBy.PRODUCER
        resolved_ts = tx["resolved_timestamp"] if same else (delivery[1] if delivery else None)
    elif state == TransactionState.DISCARDED:
        resolved_by, resolved_ts = ResolvedBy.DISCARD, discard[2]
    else:
        resolved_by, resolved_ts = None, None

    timeout_ms = conf.transaction_timeout_ms
    immunity_ms = timeout_ms
    if half.immunity_seconds:
        with contextlib.suppress(ValueError):
            immunity_ms = max(timeout_ms, int(half.immunity_seconds) * 1000)
    if state != TransactionState.PREPARED:
        next_check = None
    elif journal.last_check_timestamp is not None:
        next_check = journal.last_check_timestamp + conf.transaction_check_interval_ms
    elif journal.resumed_timestamp is not None:
        next_check = journal.resumed_timestamp
    else:
        next_check = half.born_timestamp + immunity_ms
    try:
        real_queue_id = int(half.real_queue_id or 0)
    except ValueError:
        real_queue_id = 0
    derived: dict[str, Any] = {
        "producer_group": half.producer_group or "",
        "topic": half.real_topic or "",
        "queue_id": real_queue_id,
        "tags": half.tags,
        "keys": half.keys,
        "half_queue_id": half_queue_id,
        "half_queue_offset": offset,
        "half_commit_log_offset": half.commit_log_offset,
        "born_timestamp": half.born_timestamp,
        "state": state,
        "check_times": journal.check_times,
        "resolved_by": resolved_by,
        "queue_offset": delivery[0] if delivery else None,
        "discard_reason": discard[1] if state == TransactionState.DISCARDED else "",
    }

    if tx is None:
        plan.diff(tid, MISSING, None, state)
        plan.create.append(
            {
                "transaction_id": tid,
                **derived,
                "check_immunity_ms": immunity_ms,
                "next_check_timestamp": next_check,
                "last_check_timestamp": journal.last_check_timestamp,
                "resolved_timestamp": resolved_ts,
            }
        )
    else:
        changed = {}
        for name in COMPARED_FIELDS:
            if tx[name] != derived[name]:
                plan.diff(tid, name, tx[name], derived[name])
                changed[name] = derived[name]
        if (tx["next_check_timestamp"] is None) != (next_check is None):
            plan.diff(tid, "next_check_timestamp", tx["next_check_timestamp"], next_check)
            changed["next_check_timestamp"] = next_check
        if changed:
            changed["last_check_timestamp"] = journal.last_check_timestamp
            if "state" in changed or tx["resolved_timestamp"] is None:
                changed["resolved_timestamp"] = resolved_ts
            if state != TransactionState.PREPARED:
                changed["next_check_timestamp"] = None
            elif tx["next_check_timestamp"] is None:
                changed["next_check_timestamp"] = next_check
            plan.update[tid] = changed

    # The resolution journal of a resolved transaction.
    if not resolved:
        return
    action = (
        Resolution.Action.COMMIT
        if state == TransactionState.COMMITTED
        else Resolution.Action.ROLLBACK
    )
    if resolution is None:
        plan.diff(tid, RESOLUTION, None, action)
        if op_named is not None and resolved_ts is None:
            plan.op_timestamps_wanted.add(op_named)
        plan.resolution_create.append(
            {
                "transaction_id": tid,
                "half_queue_id": half_queue_id,
                "half_queue_offset": offset,
                "action": action,
                "resolved_by": resolved_by,
                "reason": "rebuilt from the commit log",
                "resolved_timestamp": resolved_ts,
                "op_commit_log_offset": op_named,
            }
        )
        return
    repairs: dict[str, Any] = {}
    if resolution["action"] != action:
        plan.diff(tid, RESOLUTION_ACTION, resolution["action"], action)
        repairs["action"] = action
    op_stored = resolution["op_commit_log_offset"]
    if op_stored is not None and (op_stored == op_named or offset in verified):
        op_derived: int | None = op_stored
    else:
        op_derived = op_named
    if op_stored != op_derived:
        plan.diff(tid, RESOLUTION_OP_OFFSET, op_stored, op_derived)
        repairs["op_commit_log_offset"] = op_derived
    if repairs:
        plan.resolution_update[resolution["id"]] = repairs


def _extra_rows(report: RebuildReport, *, apply: bool) -> None:
    """Rows for transactions with no half message at all: deleted (with their queued check
    requests) unless a ``Resolution`` refers to them, which is left to an operator."""
    extra = (
        Transaction.objects.filter(
            ~Exists(Message.objects.filter(topic=HALF_TOPIC, msg_id=OuterRef("pk")))
        )
        .annotate(journalled=Exists(Resolution.objects.filter(transaction_id=OuterRef("pk"))))
        .order_by("pk")
        .values_list("pk", "state", "journalled")
    )
    for tid, state, journalled in extra.iterator(chunk_size=CHUNK_SIZE):
        report.differences.append(Difference(tid, EXTRA, state, None, not journalled))
        if apply and not journalled:
            with transaction.atomic():
                deleted, _ = Transaction.objects.filter(
                    ~Exists(Message.objects.filter(topic=HALF_TOPIC, msg_id=OuterRef("pk"))),
                    pk=tid,
                    resolution__isnull=True,
                ).delete()
            report.repaired += 1 if deleted else 0

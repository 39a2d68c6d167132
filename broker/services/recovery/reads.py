"""The rebuild's queries: half messages, stored rows, journals, deliveries and discard copies,
each an index range scan or index probes with explicit ids, and the consistent snapshot of a
dry run. No message body is read here (the Op log's are, in ``oplog``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django.db import connection
from django.db.models import BooleanField, Exists, F, Func, OuterRef, Q, QuerySet, Value
from django.db.models.fields.json import KT

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
)
from broker.models import ConsumeQueue, Message, Resolution, Transaction, TransactionEvent
from broker.rules.recovery import (
    CheckJournal,
    Delivery,
    DiscardCopy,
    HalfMessage,
    JournalledResolution,
    check_journal_fold,
)
from broker.rules.recovery_report import COMPARED_FIELDS

STORED_FIELDS = (
    "transaction_id",
    *COMPARED_FIELDS,
    "next_check_timestamp",
    "resolved_timestamp",
)
"""The ``Transaction`` columns a rebuild reads: the compared ones and scheduling."""

_HALF_COLUMNS = {
    "real_topic": KT(f"properties__{PROPERTY_REAL_TOPIC}"),
    "real_queue_id": KT(f"properties__{PROPERTY_REAL_QUEUE_ID}"),
    "producer_group_prop": KT(f"properties__{PROPERTY_PRODUCER_GROUP}"),
    "immunity_seconds": KT(f"properties__{PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS}"),
}


def snapshot_begin() -> None:
    """Make the just-opened outermost transaction one REPEATABLE READ, READ ONLY snapshot.
    Inside an enclosing transaction (tests) it stays as it is."""
    if connection.savepoint_ids:  # nested in an enclosing atomic(): too late to change
        return
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def any_of(field_name: str, values: Iterable[Any]) -> Q:
    """``field_name IN values``, as index probes: one array parameter (``= ANY(%s)``), not one
    parameter per value, which psycopg splits slowly. Explicit values, never a subquery: joined
    on a subquery the planner may hash a whole table per chunk."""
    return Q(_AnyOf(F(field_name), Value(list(values))))


class _AnyOf(Func):
    """``<field> = ANY(<array>)``."""

    template = "%(expressions)s)"
    arg_joiner = " = ANY("
    output_field = BooleanField()


def half_queues_read() -> list[tuple[int, int]]:
    """Every half queue as ``(queue_id, next queue offset)``, by queue id."""
    return sorted(
        ConsumeQueue.objects.filter(topic=HALF_TOPIC).values_list("queue_id", "max_offset")
    )


def halves_read(half_queue_id: int, from_offset: int, limit: int) -> list[HalfMessage]:
    """Up to ``limit`` half messages of a half queue from queue offset ``from_offset`` on, in
    queue offset order (its unique index), without their bodies."""
    return [
        HalfMessage(*row)
        for row in Message.objects.filter(
            topic=HALF_TOPIC, queue_id=half_queue_id, queue_offset__gte=from_offset
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
        )[:limit]
    ]


def check_journal_read(ids: list[str]) -> dict[str, CheckJournal]:
    """The check journal (``check_sent`` and ``resumed`` events) of the transactions ``ids``,
    folded in insertion order (``derive.check_journal_fold``)."""
    resumed = TransactionEvent.Kind.RESUMED
    events = (
        TransactionEvent.objects.filter(
            any_of("transaction_id", ids),
            kind__in=[TransactionEvent.Kind.CHECK_SENT, resumed],
        )
        .order_by("id")
        .values_list("transaction_id", "kind", "timestamp")
    )
    return check_journal_fold((tid, kind == resumed, ts) for tid, kind, ts in events)


def _by_half_offset(
    qs: QuerySet,
    half_queue_id: int,
    span: tuple[int, int],
    wanted: set[str],
    also: Iterable[str],
    lock: bool,
) -> dict[str, dict[str, Any]]:
    """Rows of ``qs`` (``values()`` of a model with ``transaction_id``, ``half_queue_id`` and
    ``half_queue_offset``) for the transactions ``wanted``: read by the range ``span`` of their
    half queue offsets (an index range scan), then by id for those of ``also`` not found there
    (a row at a wrong offset). ``lock``: ``SELECT ... FOR UPDATE``."""
    if lock:
        qs = qs.select_for_update()
    lo, hi = span
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
            for row in qs.filter(any_of("transaction_id", rest)).order_by("transaction_id")
        )
    return found


def stored_rows_read(
    half_queue_id: int, span: tuple[int, int], wanted: set[str], *, lock: bool
) -> dict[str, dict[str, Any]]:
    """The ``Transaction`` rows (``STORED_FIELDS``) of the transactions ``wanted``, whose half
    messages span the half queue offsets ``span`` (inclusive), by transaction id; locked when
    ``lock``."""
    return _by_half_offset(
        Transaction.objects.values(*STORED_FIELDS), half_queue_id, span, wanted, wanted, lock
    )


def resolutions_read(
    half_queue_id: int,
    span: tuple[int, int],
    wanted: set[str],
    also: Iterable[str],
    *,
    lock: bool,
) -> dict[str, JournalledResolution]:
    """The ``Resolution`` rows of the transactions ``wanted`` within ``span``, and of those of
    ``also`` wherever they are, by transaction id; locked when ``lock``."""
    rows = _by_half_offset(
        Resolution.objects.values(*JournalledResolution._fields),
        half_queue_id,
        span,
        wanted,
        also,
        lock,
    )
    return {tid: JournalledResolution(**row) for tid, row in rows.items()}


def newest_half_read(msg_ids: list[str]) -> dict[str, int]:
    """{msg_id: commit log offset of its newest half message} (a resume re-appends a copy)."""
    newest: dict[str, int] = {}
    for mid, clo in Message.objects.filter(any_of("msg_id", msg_ids), topic=HALF_TOPIC).values_list(
        "msg_id", "commit_log_offset"
    ):
        newest[mid] = max(clo, newest.get(mid, -1))
    return newest


def deliveries_read(half_offsets: set[int]) -> dict[int, Delivery]:
    """{half commit log offset: the message delivered from it} for the half messages at
    ``half_offsets``, read by the range of those offsets (an index range scan)."""
    return {
        pto: Delivery(queue_offset, store_ts)
        for pto, queue_offset, store_ts in Message.objects.filter(
            prepared_transaction_offset__gte=min(half_offsets),
            prepared_transaction_offset__lte=max(half_offsets),
        ).values_list("prepared_transaction_offset", "queue_offset", "store_timestamp")
        if pto in half_offsets
    }


def discard_copies_read(msg_ids: list[str]) -> dict[str, DiscardCopy]:
    """{msg_id: its newest copy on TRANS_CHECK_MAX_TIME_TOPIC} for ``msg_ids``."""
    discards: dict[str, DiscardCopy] = {}
    for mid, clo, reason, store_ts in (
        Message.objects.filter(any_of("msg_id", msg_ids), topic=CHECK_MAX_TIME_TOPIC)
        .order_by("commit_log_offset")
        .annotate(reason=KT(f"properties__{PROPERTY_DISCARD_REASON}"))
        .values_list("msg_id", "commit_log_offset", "reason", "store_timestamp")
    ):
        discards[mid] = DiscardCopy(clo, reason or "", store_ts)  # the newest copy wins
    return discards


def store_timestamps_read(commit_log_offsets: Iterable[int]) -> dict[int, int]:
    """{commit log offset: store time (ms)} of the messages at ``commit_log_offsets``."""
    return dict(
        Message.objects.filter(pk__in=commit_log_offsets).values_list(
            "commit_log_offset", "store_timestamp"
        )
    )


def extra_rows_read(chunk_size: int) -> Iterator[tuple[str, str, bool]]:
    """``(transaction_id, state, journalled)`` of every ``Transaction`` row with no half message
    at all (one anti-join), by id; ``journalled``: a ``Resolution`` refers to it."""
    return (
        Transaction.objects.filter(
            ~Exists(Message.objects.filter(topic=HALF_TOPIC, msg_id=OuterRef("pk")))
        )
        .annotate(journalled=Exists(Resolution.objects.filter(transaction_id=OuterRef("pk"))))
        .order_by("pk")
        .values_list("pk", "state", "journalled")
        .iterator(chunk_size=chunk_size)
    )

"""The rows of one archive table in one time segment, read from the database in chunks and
turned into Arrow record batches with exactly the table's columns
(``broker.pipeline.schema.ARCHIVE_TABLES``), for ``spark.createDataFrame``.

Message bodies are never read, except the Op messages' (parsed into ``op_offsets`` by
``broker.rules.op_body.op_body_parse``); ``body_size`` is the database's ``LENGTH(body)``. The
properties and details go out as the database's JSON text; the half and discard properties
the archive has columns for (REAL_TOPIC, REAL_QID, DISCARD_REASON, HALF_QUEUE_OFFSET, and
TIMER_DELIVER_MS, TIMER_DEL_UNIQKEY of delay messages and recall markers) are extracted by the
database too (``->>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import pyarrow as pa
from django.db.models import BinaryField, Case, F, Model, QuerySet, TextField, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Length

from broker.constants import (
    OP_HALF_TOPIC,
    PROPERTY_DISCARD_REASON,
    PROPERTY_HALF_QUEUE_OFFSET,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
)
from broker.models import DeliveryEvent, Message, Resolution, TransactionEvent
from broker.pipeline.arrow import arrow_table
from broker.rules.op_body import op_body_parse

CHUNK_ROWS = 20_000
"""Rows fetched (server-side cursor) and turned into one Arrow batch at a time: a commit log
chunk is ~5 MB of Python tuples and ~3 MB of Arrow."""


def _int_or_none(text: str | None) -> int | None:
    """A property's decimal text as an int; None when absent or not a decimal."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _commit_log(start_ms: int, end_ms: int) -> Iterator[tuple[Any, ...]]:
    """Every message stored in ``[start_ms, end_ms)``: the commit log's columns, the half and
    discard properties extracted, the Op body parsed, ``body_size`` and the properties' JSON."""
    rows = (
        Message.objects.filter(store_timestamp__gte=start_ms, store_timestamp__lt=end_ms)
        .annotate(
            p_real_topic=KT(f"properties__{PROPERTY_REAL_TOPIC}"),
            p_real_qid=KT(f"properties__{PROPERTY_REAL_QUEUE_ID}"),
            p_discard_reason=KT(f"properties__{PROPERTY_DISCARD_REASON}"),
            p_half_queue_offset=KT(f"properties__{PROPERTY_HALF_QUEUE_OFFSET}"),
            p_deliver_ms=KT(f"properties__{PROPERTY_TIMER_DELIVER_MS}"),
            p_del_key=KT(f"properties__{PROPERTY_TIMER_DEL_UNIQKEY}"),
            op_body=Case(
                When(topic=OP_HALF_TOPIC, then=F("body")),
                default=Value(None),
                output_field=BinaryField(),
            ),
            body_size=Length("body"),
            properties_json=Cast("properties", TextField()),
        )
        .values_list(
            "commit_log_offset",
            "topic",
            "queue_id",
            "queue_offset",
            "msg_id",
            "producer_group",
            "tags",
            "keys",
            "sys_flag",
            "born_timestamp",
            "store_timestamp",
            "prepared_transaction_offset",
            "p_real_topic",
            "p_real_qid",
            "p_discard_reason",
            "p_half_queue_offset",
            "op_body",
            "body_size",
            "properties_json",
            "message_group",
            "p_deliver_ms",
            "p_del_key",
        )
        .order_by()
    )
    for row in _iterate(rows):
        *head, real_topic, real_qid, reason, half_offset, op_body, size, props = row[:-3]
        group, deliver_ms, del_key = row[-3:]
        yield (
            *head,
            real_topic,
            _int_or_none(real_qid),
            reason,
            _int_or_none(half_offset),
            op_body_parse(op_body).offsets if op_body is not None else None,
            size,
            props,
            group,
            _int_or_none(deliver_ms),
            del_key,
        )


def _resolutions(start_ms: int, end_ms: int) -> Iterator[tuple[Any, ...]]:
    """The resolution journal rows resolved in ``[start_ms, end_ms)``."""
    rows = (
        Resolution.objects.filter(resolved_timestamp__gte=start_ms, resolved_timestamp__lt=end_ms)
        .values_list(
            "transaction_id",
            "half_queue_id",
            "half_queue_offset",
            "action",
            "resolved_by",
            "reason",
            "resolved_timestamp",
        )
        .order_by()
    )
    return _iterate(rows)


def _transaction_events(start_ms: int, end_ms: int) -> Iterator[tuple[Any, ...]]:
    """The check and operator journal rows of ``[start_ms, end_ms)``, detail as JSON text."""
    rows = (
        TransactionEvent.objects.filter(timestamp__gte=start_ms, timestamp__lt=end_ms)
        .annotate(detail_json=Cast("detail", TextField()))
        .values_list(
            "id",
            "transaction_id",
            "kind",
            "timestamp",
            "check_times",
            "outcome",
            "actor",
            "detail_json",
        )
        .order_by()
    )
    return _iterate(rows)


def _delivery_events(start_ms: int, end_ms: int) -> Iterator[tuple[Any, ...]]:
    """The delivery journal rows of ``[start_ms, end_ms)``."""
    rows = (
        DeliveryEvent.objects.filter(timestamp__gte=start_ms, timestamp__lt=end_ms)
        .values_list(
            "id",
            "consumer_group",
            "topic",
            "queue_id",
            "queue_offset",
            "commit_log_offset",
            "msg_id",
            "kind",
            "delivery_attempt",
            "timestamp",
        )
        .order_by()
    )
    return _iterate(rows)


def _iterate(rows: QuerySet) -> Iterator[tuple[Any, ...]]:
    return rows.iterator(chunk_size=CHUNK_ROWS)


READERS: dict[str, Callable[[int, int], Iterable[tuple[Any, ...]]]] = {
    "commit_log": _commit_log,
    "resolutions": _resolutions,
    "transaction_events": _transaction_events,
    "delivery_events": _delivery_events,
}
"""Per archive table, its rows (tuples in the table's column order) whose time column
(``TIME_COLUMNS``) lies in ``[start_ms, end_ms)``. Each is an index range scan of that column."""

TIME_MODELS: dict[str, type[Model]] = {
    "commit_log": Message,
    "resolutions": Resolution,
    "transaction_events": TransactionEvent,
    "delivery_events": DeliveryEvent,
}
"""Per archive table, the model it is read from; its time column (``TIME_COLUMNS``) is the
model's field of the same name."""


def segment_tables(table: str, start_ms: int, end_ms: int) -> Iterator[pa.Table]:
    """The rows of ``table`` whose time column lies in ``[start_ms, end_ms)``, as Arrow tables
    of at most ``CHUNK_ROWS`` rows with the archive's schema
    (``broker.pipeline.arrow.arrow_schema``); nothing when there are none.

    Raises:
        KeyError: not one of ``ARCHIVE_TABLES``.
    """
    rows = iter(READERS[table](start_ms, end_ms))
    while chunk := list(islice(rows, CHUNK_ROWS)):
        yield arrow_table(table, chunk)

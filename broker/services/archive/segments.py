"""The archive's time segments: where one starts, up to when they are closed, and where the
next rows to archive are (``broker.services.archive.export`` writes them)."""

from __future__ import annotations

from django.db.models import Min

from broker.pipeline.schema import TIME_COLUMNS
from broker.services.archive.rows import TIME_MODELS


def segment_start(timestamp_ms: int, segment_ms: int) -> int:
    """The start of the segment holding ``timestamp_ms``: segments are aligned to the epoch
    (``HALFMOON_ARCHIVE_SEGMENT_MS`` divides an hour, so they are aligned to hours too)."""
    return timestamp_ms // segment_ms * segment_ms


def closed_until(*, now_ms: int, segment_ms: int, lag_ms: int, until_ms: int | None = None) -> int:
    """The end of the last closed segment: a segment ``[s, e)`` is closed when
    ``e + lag_ms <= now_ms``; with ``until_ms`` also ``e <= until_ms``. Every segment ending at
    or before the returned time (ms) may be archived."""
    limit = segment_start(now_ms - lag_ms, segment_ms)
    if until_ms is not None:
        limit = min(limit, segment_start(until_ms, segment_ms))
    return limit


def first_row_at(from_ms: int) -> int | None:
    """The earliest time (ms) at or after ``from_ms`` of any row of any archived log, or None:
    one index read per log (its time column's index), so empty stretches are skipped."""
    found = []
    for table, model in TIME_MODELS.items():
        column = TIME_COLUMNS[table]
        at = model.objects.filter(**{f"{column}__gte": from_ms}).aggregate(m=Min(column))["m"]
        if at is not None:
            found.append(at)
    return min(found, default=None)

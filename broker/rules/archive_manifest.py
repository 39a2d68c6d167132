"""An archive segment's manifest (``{uri}/_segments/{start_ms}.json``): what the export wrote
for one segment, kept in the archive itself, so that a database restored to an earlier point in
time can tell which segments the archive already holds and adopt them rather than rewrite
them from its fewer rows (``broker.services.archive.export``).

A manifest records the segment's range, its rows per table, and the largest commit log offset,
queue offset per queue and journal id its rows hold: the floors a restored database moves its
counters past, so a new message never reuses an offset the archive already holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class SegmentManifest:
    """One archived segment ``[start_ms, end_ms)`` (ms since the epoch).

    Attributes:
        rows: rows written per archive table (``{"commit_log": 120, ...}``).
        max_commit_log_offset: the largest ``commit_log_offset`` of its ``commit_log`` rows
            (None without any).
        max_queue_offsets: per ``(topic, queue_id)`` the largest ``queue_offset`` of its
            ``commit_log`` rows.
        max_ids: per journal table with an id (``transaction_events``, ``delivery_events``),
            the largest id of its rows (a table without rows is absent).
        archived_ms: when the segment was written (ms); ``duration_ms``: how long it took.
    """

    start_ms: int
    end_ms: int
    rows: dict[str, int]
    max_commit_log_offset: int | None = None
    max_queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    max_ids: dict[str, int] = field(default_factory=dict)
    archived_ms: int = 0
    duration_ms: int = 0


@dataclass(frozen=True)
class OffsetFloors:
    """The largest offsets and ids some manifests hold (see ``offset_floors``): a database
    adopting them moves each of its counters past these."""

    commit_log_offset: int | None
    queue_offsets: dict[tuple[str, int], int]
    ids: dict[str, int]


def manifest_format(manifest: SegmentManifest) -> str:
    """The manifest as JSON text (keys sorted; the queue offsets as ``[topic, queue_id,
    offset]`` triples, sorted)."""
    return json.dumps(
        {
            "version": MANIFEST_VERSION,
            "start_ms": manifest.start_ms,
            "end_ms": manifest.end_ms,
            "rows": manifest.rows,
            "max_commit_log_offset": manifest.max_commit_log_offset,
            "max_queue_offsets": sorted(
                [topic, queue_id, offset]
                for (topic, queue_id), offset in manifest.max_queue_offsets.items()
            ),
            "max_ids": manifest.max_ids,
            "archived_ms": manifest.archived_ms,
            "duration_ms": manifest.duration_ms,
        },
        sort_keys=True,
    )


def _int(value: object, name: str) -> int:
    if type(value) is not int:
        raise ValueError(f"manifest {name} is not an integer: {value!r}")
    return value


def manifest_parse(text: str) -> SegmentManifest:
    """The manifest written by ``manifest_format``.

    Raises:
        ValueError: not JSON, another version, a field missing or of the wrong type, or an
            empty range (``end_ms <= start_ms``).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"manifest is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        raise ValueError(f"not a version {MANIFEST_VERSION} manifest")
    try:
        start, end = _int(data["start_ms"], "start_ms"), _int(data["end_ms"], "end_ms")
        rows = {str(t): _int(n, f"rows.{t}") for t, n in data["rows"].items()}
        top = data["max_commit_log_offset"]
        queues = {
            (str(topic), _int(queue_id, "queue_id")): _int(offset, "queue offset")
            for topic, queue_id, offset in data["max_queue_offsets"]
        }
        ids = {str(t): _int(n, f"max_ids.{t}") for t, n in data["max_ids"].items()}
        archived = _int(data["archived_ms"], "archived_ms")
        took = _int(data["duration_ms"], "duration_ms")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"manifest field missing or malformed: {exc}") from exc
    if end <= start:
        raise ValueError(f"manifest range [{start}, {end}) is empty")
    return SegmentManifest(
        start_ms=start,
        end_ms=end,
        rows=rows,
        max_commit_log_offset=None if top is None else _int(top, "max_commit_log_offset"),
        max_queue_offsets=queues,
        max_ids=ids,
        archived_ms=archived,
        duration_ms=took,
    )


def manifests_adoptable(
    manifests: Iterable[SegmentManifest], *, from_ms: int, until_ms: int
) -> list[SegmentManifest]:
    """The manifests a database whose watermark is ``from_ms`` may adopt, in time order: those
    starting at or after ``from_ms`` and ending at or before ``until_ms`` (the last closed
    segment's end), each starting at or after the previous one's end. It stops at the first
    that overlaps its predecessor (segments written under two ``HALFMOON_ARCHIVE_SEGMENT_MS``):
    from there on the export writes as usual. Gaps between them are stretches the export
    skipped, without rows; the caller checks that its database has none there either."""
    out: list[SegmentManifest] = []
    at = from_ms
    for manifest in sorted(manifests, key=lambda m: (m.start_ms, m.end_ms)):
        if manifest.start_ms < from_ms:
            continue
        if manifest.start_ms < at or manifest.end_ms > until_ms:
            break
        out.append(manifest)
        at = manifest.end_ms
    return out


def offset_floors(manifests: Iterable[SegmentManifest]) -> OffsetFloors:
    """The largest commit log offset, queue offset per queue and id per journal table the
    ``manifests`` hold together."""
    top: int | None = None
    queues: dict[tuple[str, int], int] = {}
    ids: dict[str, int] = {}
    for manifest in manifests:
        offset = manifest.max_commit_log_offset
        if offset is not None and (top is None or offset > top):
            top = offset
        _merge_max(queues, manifest.max_queue_offsets)
        _merge_max(ids, manifest.max_ids)
    return OffsetFloors(commit_log_offset=top, queue_offsets=queues, ids=ids)


def _merge_max(into: dict, values: Mapping) -> None:
    for key, value in values.items():
        into[key] = max(into.get(key, value), value)

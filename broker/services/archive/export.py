"""The archive export: every closed time segment of the logs, from the archive watermark on,
written to Parquet under HALFMOON_ARCHIVE_URI (layout: ``broker.pipeline.schema``), then the
watermark advanced, then the prune (``broker.services.archive.prune``).

Order of one segment ``[s, e)``: each table's rows are read (``rows.segment_tables``) and
written with ``archive_io.segment_write`` (under ``_tmp``, then renamed into place with its
``_SUCCESS``, replacing an earlier copy); only when every table is in place does one database
transaction write the ``ArchiveSegment`` row and move ``ArchiveWatermark("logs")`` to ``e``.
A crash at any point leaves the watermark at ``s``: the next run cleans ``_tmp`` and writes the
whole segment again, replacing what the crashed run had renamed into place, so the archive
ends up the same as after an uninterrupted export (same rows, nothing twice, nothing missing).
That needs the rows of ``[s, e)`` not to change once the segment is closed: they are written
with the clock's time, so after ``HALFMOON_ARCHIVE_LAG_MS`` (longer than any write
transaction) nothing lands there any more, and the prune deletes only below the watermark.

Between the renames and that transaction, the segment's manifest is written into the archive
(``archive_io.manifest_write``: rows per table, the largest commit log offset, queue offsets and
journal ids it holds). A database restored to an earlier point in time has its watermark behind
the archive: the export then adopts the manifests at and after its watermark (``_adopt``)
instead of writing those segments again from its fewer rows, which would lose archived rows. It
records their ``ArchiveSegment`` rows, moves the watermark past them, and moves the commit log
offset sequence, the journals' id sequences and each ``ConsumeQueue.max_offset`` past what they
hold, so a new message never takes an offset the archive already has. A crash after the
manifest but before the watermark moved is adopted the same way; a segment without a manifest
(a crash before it) is written again, as above.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Min

from broker.conf import conf
from broker.models import ArchiveSegment, ConsumeQueue, DeliveryEvent, Message, TransactionEvent
from broker.models import now_ms as clock_ms
from broker.pipeline import archive_io
from broker.pipeline.schema import ARCHIVE_TABLES, TIME_COLUMNS, ddl, segment_path
from broker.pipeline.spark import HadoopFiles, job_group, spark_session
from broker.plumbing.leases import LeaseKeeper, lease_acquire, lease_owner, lease_release
from broker.rules.archive_manifest import (
    OffsetFloors,
    SegmentManifest,
    manifests_adoptable,
    offset_floors,
)
from broker.services.archive.rows import TIME_MODELS, segment_tables
from broker.services.archive.watermark import archived_until_advance, archived_until_ms

logger = logging.getLogger("halfmoon.archive")

LEASE_NAME = "archive"
LEASE_TTL_MS = 300_000
"""The export's ``ScanLease``: renewed every 100 s while it runs; a dead exporter's lease
expires within 5 minutes, then the next export takes over (and cleans its ``_tmp``)."""

ID_SEQUENCES = {"transaction_events": TransactionEvent, "delivery_events": DeliveryEvent}
"""The archive tables whose rows carry their model's ``id``: a manifest records the largest,
and an adopting database moves the id's sequence past it (the archive sorts them by id)."""


@dataclass
class ArchiveExport:
    """What one export did: ``segments`` written, ``rows`` written per archive table (summed
    over those segments), ``adopted``: segments the archive already held past the watermark
    (a restored database's, see ``_adopt``), recorded without being written, the watermark
    after it (``archived_until_ms``), the rows the prune deleted per model (``pruned``), and
    ``skipped`` when another export held the lease."""

    segments: int = 0
    adopted: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARCHIVE_TABLES, 0))
    archived_until_ms: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    skipped: bool = False


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


def archive_export(
    *, now_ms: int | None = None, until_ms: int | None = None, prune: bool = True
) -> ArchiveExport:
    """Archive every closed segment (see ``closed_until``) from the watermark on, then prune.

    Args:
        now_ms: the time to judge closed segments and the prune by (default the clock).
        until_ms: archive no segment ending after this time (ms; default: all closed ones).
        prune: run ``archive_prune`` after the export (default True).

    Returns:
        an ``ArchiveExport``; ``skipped`` (nothing done) when another export holds the lease.

    Raises:
        RuntimeError: Spark did not start (``spark_session``).
        OSError: the archive's file system refused a rename.
    """
    from broker.services.archive.prune import archive_prune

    now = clock_ms() if now_ms is None else now_ms
    owner = lease_owner()
    if not lease_acquire(name=LEASE_NAME, owner=owner, ttl_ms=LEASE_TTL_MS):
        return ArchiveExport(skipped=True)
    keeper = LeaseKeeper(name=LEASE_NAME, owner=owner, ttl_ms=LEASE_TTL_MS)
    keeper.start()
    try:
        result = _export(now=now, until_ms=until_ms, keeper=keeper)
        if prune and not keeper.lost:
            result.pruned = archive_prune(now_ms=now)
    finally:
        keeper.stop()
        lease_release(name=LEASE_NAME, owner=owner)
    return result


def archive_export_due(*, now_ms: int | None = None) -> int:
    """The beat task's export (``tasks.pipeline.archive_export``): ``archive_export`` of every
    closed segment, then the prune. Returns the segments written (0 when another export held
    the lease)."""
    return archive_export(now_ms=now_ms).segments


def _export(*, now: int, until_ms: int | None, keeper: LeaseKeeper) -> ArchiveExport:
    segment_ms = conf.archive_segment_ms
    limit = closed_until(
        now_ms=now, segment_ms=segment_ms, lag_ms=conf.archive_lag_ms, until_ms=until_ms
    )
    mark = archived_until_ms()
    result = ArchiveExport(archived_until_ms=mark)
    if limit <= mark:
        return result  # nothing closed since the last export
    uri = settings.HALFMOON_ARCHIVE_URI
    # Started whenever a segment closed since the last export, if only to read the manifests
    # (through Hadoop's file system, whatever the URI's scheme); a worker keeps it.
    spark = spark_session(
        master=settings.HALFMOON_SPARK_MASTER, driver_memory=settings.HALFMOON_SPARK_DRIVER_MEMORY
    )
    archive_io.tmp_clean(spark, uri)
    adopted = _adopt(spark, uri=uri, from_ms=mark, until_ms=limit)
    if adopted:
        result.adopted = len(adopted)
        result.archived_until_ms = adopted[-1].end_ms
    start = result.archived_until_ms
    while not keeper.lost:
        at = first_row_at(start)
        if at is None or segment_start(at, segment_ms) + segment_ms > limit:
            break
        start = max(start, segment_start(at, segment_ms))
        # Up to the next aligned boundary: after HALFMOON_ARCHIVE_SEGMENT_MS changed, the
        # watermark may sit inside a segment, whose end is still closed (checked above).
        end = segment_start(start, segment_ms) + segment_ms
        began = time.monotonic()
        manifest = _segment_write(spark, uri=uri, start_ms=start, end_ms=end)
        if keeper.lost:
            break  # another export may have taken over: leave the watermark to it
        manifest = replace(
            manifest,
            archived_ms=clock_ms(),
            duration_ms=int((time.monotonic() - began) * 1000),
        )
        archive_io.manifest_write(spark, manifest, uri=uri)
        _segment_commit(
            uri=uri,
            start_ms=start,
            end_ms=end,
            rows=manifest.rows,
            duration_ms=manifest.duration_ms,
        )
        result.segments += 1
        for table, n in manifest.rows.items():
            result.rows[table] += n
        start = end
        result.archived_until_ms = start
    if not keeper.lost and limit > result.archived_until_ms:
        # Nothing is left below limit but empty segments: pass them (no write can land there).
        archived_until_advance(limit)
        result.archived_until_ms = limit
    return result


def _segment_write(spark, *, uri: str, start_ms: int, end_ms: int) -> SegmentManifest:
    """Write every table's rows of ``[start_ms, end_ms)`` as the segment at ``start_ms``;
    a table with no rows there has no segment directory (one left by an earlier write is
    deleted). Returns its manifest (rows per table and the largest offsets and ids written;
    ``archived_ms`` and ``duration_ms`` left 0)."""
    rows: dict[str, int] = {}
    top: int | None = None
    queues: dict[tuple[str, int], int] = {}
    ids: dict[str, int] = {}
    with job_group(spark, f"archive-{start_ms}", f"archive segment {start_ms}-{end_ms}"):
        for table in ARCHIVE_TABLES:
            chunks = list(segment_tables(table, start_ms, end_ms))
            rows[table] = sum(c.num_rows for c in chunks)
            if not rows[table]:
                HadoopFiles(spark).delete(segment_path(uri, table, start_ms))
                continue
            data = pa.concat_tables(chunks) if len(chunks) > 1 else chunks[0]
            del chunks
            if table == "commit_log":
                top, queues = _commit_log_maxima(data)
            elif table in ID_SEQUENCES:
                ids[table] = pc.max(data["id"]).as_py()
            frame = spark.createDataFrame(data, schema=ddl(table))
            del data
            archive_io.segment_write(spark, frame, uri=uri, table=table, start_ms=start_ms)
    return SegmentManifest(
        start_ms=start_ms,
        end_ms=end_ms,
        rows=rows,
        max_commit_log_offset=top,
        max_queue_offsets=queues,
        max_ids=ids,
    )


def _commit_log_maxima(data: pa.Table) -> tuple[int, dict[tuple[str, int], int]]:
    """Of a segment's commit log rows (at least one): the largest ``commit_log_offset``, and
    per ``(topic, queue_id)`` the largest ``queue_offset``."""
    per_queue = data.group_by(["topic", "queue_id"]).aggregate([("queue_offset", "max")])
    queues = {
        (topic, queue_id): offset
        for topic, queue_id, offset in zip(
            per_queue["topic"].to_pylist(),
            per_queue["queue_id"].to_pylist(),
            per_queue["queue_offset_max"].to_pylist(),
            strict=True,
        )
    }
    return pc.max(data["commit_log_offset"]).as_py(), queues


def _segment_commit(
    *, uri: str, start_ms: int, end_ms: int, rows: dict[str, int], duration_ms: int
) -> None:
    """The segment ``[start_ms, end_ms)`` is in place (``rows`` per table, written in
    ``duration_ms``): record it and move the watermark to ``end_ms``, in one database
    transaction."""
    with transaction.atomic():
        ArchiveSegment.objects.update_or_create(
            start_timestamp=start_ms,
            defaults={
                "end_timestamp": end_ms,
                "uri": uri,
                "rows": rows,
                "archived_timestamp": clock_ms(),
                "duration_ms": duration_ms,
            },
        )
        archived_until_advance(end_ms)
    logger.info("archived segment %d-%d in %d ms: %s", start_ms, end_ms, duration_ms, rows)


def _adopt(spark, *, uri: str, from_ms: int, until_ms: int) -> list[SegmentManifest]:
    """Adopt the segments the archive holds from the watermark ``from_ms`` on (ms; ending at
    or before ``until_ms``) that this database has not recorded: a database restored to an
    earlier point in time, or an export that crashed after a segment's manifest was written
    but before its watermark moved (``manifests_adoptable`` picks them, in order).

    A segment is adopted only while this database holds no more rows than the archive in it
    and none in the stretches the archive skipped before it (its rows are then a part of what
    the archive holds, as a restored database's are); at the first that fails the adoption
    stops and the export writes from there as usual. In one database transaction: an
    ``ArchiveSegment`` per adopted segment, the watermark moved to the last one's end, and the
    offsets moved past the archive's (``_offsets_past``).

    Returns:
        the manifests adopted, in time order ([] when none).
    """
    candidates = manifests_adoptable(
        archive_io.manifests_read(spark, uri=uri, from_ms=from_ms),
        from_ms=from_ms,
        until_ms=until_ms,
    )
    adopted: list[SegmentManifest] = []
    at = from_ms
    for manifest in candidates:
        first = first_row_at(at)
        if first is not None and first < manifest.start_ms:
            logger.warning(
                "archive segment %d not adopted: the database has rows at %d, before it, "
                "that the archive skipped; writing from there",
                manifest.start_ms,
                first,
            )
            break
        beyond = _rows_beyond(manifest)
        if beyond:
            logger.warning(
                "archive segment %d not adopted: the database holds more %s rows than the "
                "archive's; writing it again",
                manifest.start_ms,
                beyond,
            )
            break
        adopted.append(manifest)
        at = manifest.end_ms
    if not adopted:
        return []
    floors = offset_floors(adopted)
    with transaction.atomic():
        for manifest in adopted:
            ArchiveSegment.objects.update_or_create(
                start_timestamp=manifest.start_ms,
                defaults={
                    "end_timestamp": manifest.end_ms,
                    "uri": uri,
                    "rows": manifest.rows,
                    "archived_timestamp": manifest.archived_ms,
                    "duration_ms": manifest.duration_ms,
                },
            )
        archived_until_advance(adopted[-1].end_ms)
        _offsets_past(floors)
    logger.warning(
        "adopted %d archived segment(s) %d-%d the database had not recorded (restored to an "
        "earlier point?): watermark moved to %d, commit log offsets past %s, %d queue(s) past "
        "their archived offsets",
        len(adopted),
        adopted[0].start_ms,
        adopted[-1].end_ms,
        adopted[-1].end_ms,
        floors.commit_log_offset,
        len(floors.queue_offsets),
    )
    return adopted


def _rows_beyond(manifest: SegmentManifest) -> str | None:
    """The first archive table of which the database holds more rows in the manifest's range
    than the manifest records, or None (one index range count per table)."""
    for table, model in TIME_MODELS.items():
        column = TIME_COLUMNS[table]
        held = model.objects.filter(
            **{f"{column}__gte": manifest.start_ms, f"{column}__lt": manifest.end_ms}
        ).count()
        if held > manifest.rows.get(table, 0):
            return table
    return None


def _offsets_past(floors: OffsetFloors) -> None:
    """Move the commit log offset sequence, the journals' id sequences and each queue's
    ``ConsumeQueue.max_offset`` (the next append's offset) past ``floors``, never back; a queue
    the database lacks (its topic made after the restore point) is made at that offset, so a
    topic made again appends after the archive's messages."""
    if floors.commit_log_offset is not None:
        _sequence_past(Message, "commit_log_offset", floors.commit_log_offset)
    for table, top in floors.ids.items():
        _sequence_past(ID_SEQUENCES[table], "id", top)
    if not floors.queue_offsets:
        return
    ConsumeQueue.objects.bulk_create(
        [
            ConsumeQueue(topic=topic, queue_id=queue_id, max_offset=top + 1)
            for (topic, queue_id), top in floors.queue_offsets.items()
        ],
        ignore_conflicts=True,
    )
    for (topic, queue_id), top in floors.queue_offsets.items():
        ConsumeQueue.objects.filter(topic=topic, queue_id=queue_id, max_offset__lte=top).update(
            max_offset=top + 1
        )


def _sequence_past(model, column: str, top: int) -> None:
    """Make the next value of ``model.column``'s sequence greater than ``top``: ``setval`` when
    its next value is not (one value is drawn either way)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [model._meta.db_table, column])
        (sequence,) = cursor.fetchone()
        cursor.execute(
            "SELECT CASE WHEN nextval(%s::regclass) <= %s THEN setval(%s::regclass, %s) END",
            [sequence, top, sequence, top],
        )

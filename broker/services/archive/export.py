"""The archive export: every closed time segment of the logs (``segments``), from the archive
watermark on, written to Parquet under HALFMOON_ARCHIVE_URI (layout: ``broker.pipeline.schema``),
then the watermark advanced, then the prune (``broker.services.archive.prune``).

Order of one segment ``[s, e)``: each table's rows are read (``rows.segment_tables``) and
written with ``archive_io.segment_write`` (under ``_tmp``, then renamed into place with its
``_SUCCESS``, replacing an earlier copy), then its manifest; only when every table is in place
does one database transaction write the ``ArchiveSegment`` row and move
``ArchiveWatermark("logs")`` to ``e``. A crash at any point leaves the watermark at ``s``: the
next run writes the whole segment again (or adopts it, ``adoption``, when its manifest was
written). Why the archive then ends up the same as after an uninterrupted export:
docs/design.md, "Archive export".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from django.conf import settings
from django.db import transaction

from broker.conf import conf
from broker.models import ArchiveSegment
from broker.pipeline import archive_io
from broker.pipeline.schema import ARCHIVE_TABLES, ddl, segment_path
from broker.pipeline.spark import HadoopFiles, job_group, spark_session
from broker.plumbing.leases import LeaseKeeper, lease_acquire, lease_owner, lease_release
from broker.rules.archive_manifest import SegmentManifest
from broker.rules.clock import now_ms as clock_ms
from broker.services.archive.adoption import ID_SEQUENCES, segments_adopt
from broker.services.archive.rows import segment_tables
from broker.services.archive.segments import closed_until, first_row_at, segment_start
from broker.services.archive.watermark import archived_until_advance, archived_until_ms

logger = logging.getLogger("halfmoon.archive")

LEASE_NAME = "archive"
LEASE_TTL_MS = 300_000
"""The export's ``ScanLease``: renewed every 100 s while it runs; a dead exporter's lease
expires within 5 minutes, then the next export takes over (and cleans its ``_tmp``)."""


@dataclass
class ArchiveExport:
    """What one export did: ``segments`` written, ``rows`` written per archive table (summed
    over those segments), ``adopted``: segments the archive already held past the watermark
    (a restored database's, see ``adoption``), recorded without being written, the watermark
    after it (``archived_until_ms``), the rows the prune deleted per model (``pruned``), and
    ``skipped`` when another export held the lease."""

    segments: int = 0
    adopted: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARCHIVE_TABLES, 0))
    archived_until_ms: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    skipped: bool = False


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
    adopted = segments_adopt(spark, uri=uri, from_ms=mark, until_ms=limit)
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

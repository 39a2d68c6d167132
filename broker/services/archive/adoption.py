"""Adoption of archived segments a database has not recorded (``segments_adopt``), run by the
export before it writes.

Each segment's manifest (``archive_io.manifest_write``: rows per table, the largest commit log
offset, queue offsets and journal ids it holds) is written into the archive before the
watermark moves. A database restored to an earlier point in time has its watermark behind the
archive: the export then adopts the manifests at and after its watermark instead of writing
those segments again from its fewer rows, which would lose archived rows. It records their
``ArchiveSegment`` rows, moves the watermark past them, and moves the commit log offset
sequence, the journals' id sequences and each ``ConsumeQueue.max_offset`` past what they hold,
so a new message never takes an offset the archive already has. A crash after the manifest but
before the watermark moved is adopted the same way.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction

from broker.models import ArchiveSegment, ConsumeQueue, DeliveryEvent, Message, TransactionEvent
from broker.pipeline import archive_io
from broker.pipeline.schema import TIME_COLUMNS
from broker.rules.archive_manifest import (
    OffsetFloors,
    SegmentManifest,
    manifests_adoptable,
    offset_floors,
)
from broker.services.archive.rows import TIME_MODELS
from broker.services.archive.segments import first_row_at
from broker.services.archive.watermark import archived_until_advance

logger = logging.getLogger("halfmoon.archive")

ID_SEQUENCES = {"transaction_events": TransactionEvent, "delivery_events": DeliveryEvent}
"""The archive tables whose rows carry their model's ``id``: a manifest records the largest,
and an adopting database moves the id's sequence past it (the archive sorts them by id)."""


def segments_adopt(spark, *, uri: str, from_ms: int, until_ms: int) -> list[SegmentManifest]:
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

"""A database restored to a point in time older than the archive's newest segment: the export
adopts the archive's newer segments (by their manifests) rather than writing them again from
the database's fewer rows, and moves the offsets past the archive's, so a new message never
takes one the archive holds. The restore is played here by rewinding the database to what it
held at that point (the e2e test ``tests/e2e/test_backup_restore.py`` restores a real backup).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Max

from broker.models import (
    ArchiveSegment,
    ArchiveWatermark,
    ConsumeQueue,
    Delivery,
    DeliveryEvent,
    Message,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.pipeline.archive_io import table_read
from broker.pipeline.schema import ARCHIVE_TABLES
from broker.rules.clock import now_ms
from broker.services.archive.export import archive_export
from broker.services.archive.segments import closed_until, segment_start
from broker.services.commitlog.messages import message_send
from tests.pipeline.archive_support import (
    MINUTE_MS,
    archive_rows,
    broker_round,
    broker_setup,
    logs_age,
)

SEGMENT_MS = 600_000
LAG_MS = 60_000


@dataclass
class RestorePoint:
    """What the database held at the restore point: enough to rewind it there."""

    watermark: int
    segments: set[int]
    commit_log_offset: int
    transaction_event_id: int
    delivery_event_id: int
    queues: dict[tuple[str, int], int]
    at_ms: int


def _restore_point() -> RestorePoint:
    return RestorePoint(
        watermark=ArchiveWatermark.objects.get(name="logs").archived_until_timestamp,
        segments=set(ArchiveSegment.objects.values_list("start_timestamp", flat=True)),
        commit_log_offset=Message.objects.aggregate(m=Max("commit_log_offset"))["m"],
        transaction_event_id=TransactionEvent.objects.aggregate(m=Max("id"))["m"],
        delivery_event_id=DeliveryEvent.objects.aggregate(m=Max("id"))["m"],
        queues={(q.topic, q.queue_id): q.max_offset for q in ConsumeQueue.objects.all()},
        at_ms=now_ms(),
    )


def _setval(model, column: str, value: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, %s), %s)",
            [model._meta.db_table, column, value],
        )


def _rewind(point: RestorePoint) -> None:
    """Put the database back where it was at ``point``, as a point-in-time restore does: the
    rows written since gone, the counters and the archive's records as they were."""
    Delivery.objects.filter(message_id__gt=point.commit_log_offset).delete()
    later = Transaction.objects.filter(born_timestamp__gte=point.at_ms)
    Resolution.objects.filter(transaction__in=later).delete()
    later.delete()
    Message.objects.filter(commit_log_offset__gt=point.commit_log_offset).delete()
    TransactionEvent.objects.filter(id__gt=point.transaction_event_id).delete()
    DeliveryEvent.objects.filter(id__gt=point.delivery_event_id).delete()
    for (topic, queue_id), offset in point.queues.items():
        ConsumeQueue.objects.filter(topic=topic, queue_id=queue_id).update(max_offset=offset)
    ConsumeQueue.objects.exclude(topic__in={t for t, _ in point.queues}).delete()
    ArchiveSegment.objects.exclude(start_timestamp__in=point.segments).delete()
    ArchiveWatermark.objects.filter(name="logs").update(archived_until_timestamp=point.watermark)
    _setval(Message, "commit_log_offset", point.commit_log_offset)
    _setval(TransactionEvent, "id", point.transaction_event_id)
    _setval(DeliveryEvent, "id", point.delivery_event_id)


def _files(uri: str) -> dict[str, bytes]:
    """Every file in place (not under ``_tmp``) with its contents and modification time."""
    out = {}
    for path in Path(uri).rglob("*"):
        name = str(path.relative_to(uri))
        if path.is_file() and not name.startswith("_tmp/"):
            out[name] = (path.stat().st_mtime_ns, path.read_bytes())
    return out


def _archived_maxima(spark, uri: str) -> tuple[int, dict[tuple[str, int], int], int]:
    """The archive's largest commit log offset, queue offset per queue and delivery event id."""
    log = table_read(spark, uri=uri, table="commit_log").collect()
    queues: dict[tuple[str, int], int] = {}
    for row in log:
        key = (row.topic, row.queue_id)
        queues[key] = max(queues.get(key, row.queue_offset), row.queue_offset)
    events = table_read(spark, uri=uri, table="delivery_events").collect()
    return max(r.commit_log_offset for r in log), queues, max(r.id for r in events)


@pytest.mark.django_db(transaction=True)
def test_a_database_restored_before_the_archive_adopts_its_newer_segments(
    spark, settings, tmp_path, caplog
):
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    broker_round("a")
    logs_age(50 * MINUTE_MS)
    first = archive_export(now_ms=now_ms(), prune=False)
    assert first.segments >= 1 and first.adopted == 0
    point = _restore_point()  # the backup's restore point: round a archived, b not yet written

    broker_round("b")
    later = segment_start(now_ms(), SEGMENT_MS) + SEGMENT_MS + LAG_MS
    second = archive_export(now_ms=later, prune=False)
    assert second.segments >= 1
    newest = ArchiveSegment.objects.order_by("start_timestamp").last()
    manifest = json.loads((Path(uri) / "_segments" / f"{newest.start_timestamp}.json").read_text())
    assert manifest["rows"] == newest.rows
    assert (
        manifest["max_commit_log_offset"]
        == Message.objects.aggregate(m=Max("commit_log_offset"))["m"]
    )
    top_offset, top_queues, top_delivery_event = _archived_maxima(spark, uri)
    assert top_offset > point.commit_log_offset
    expected = archive_rows(spark, uri)

    _rewind(point)
    assert ArchiveWatermark.objects.get(name="logs").archived_until_timestamp < newest.end_timestamp
    files = _files(uri)

    # The export after the restore adopts the newer segments and writes nothing.
    with caplog.at_level("WARNING", logger="halfmoon.archive"):
        result = archive_export(now_ms=later, prune=False)
    assert (result.segments, result.adopted) == (0, second.segments)
    assert "adopted" in caplog.text
    assert _files(uri) == files  # nothing rewritten, renamed or removed
    assert archive_rows(spark, uri) == expected
    limit = closed_until(now_ms=later, segment_ms=SEGMENT_MS, lag_ms=LAG_MS)
    assert result.archived_until_ms == limit >= newest.end_timestamp
    assert ArchiveWatermark.objects.get(name="logs").archived_until_timestamp == limit
    adopted = ArchiveSegment.objects.get(start_timestamp=newest.start_timestamp)
    assert (adopted.end_timestamp, adopted.rows) == (newest.end_timestamp, newest.rows)
    assert ArchiveSegment.objects.count() == first.segments + second.segments

    # The counters are past the archive's: each queue's next offset, and the sequences.
    for (topic, queue_id), offset in top_queues.items():
        assert ConsumeQueue.objects.get(topic=topic, queue_id=queue_id).max_offset > offset
    sent = message_send(topic="TranTest", body=b"after the restore", keys="restored")
    assert sent.commit_log_offset > top_offset
    assert sent.queue_offset > top_queues.get(("TranTest", sent.queue_id), -1)
    event = DeliveryEvent.objects.create(
        consumer_group="C1",
        topic="TranTest",
        queue_id=sent.queue_id,
        queue_offset=sent.queue_offset,
        commit_log_offset=sent.commit_log_offset,
        msg_id=sent.msg_id,
        kind="acked",
    )
    assert event.id > top_delivery_event

    # Once closed, the new rows' segment is written as usual, beside the adopted ones. (This
    # test's clock, ``later``, runs ahead of the real one: the new rows are put after it.)
    Message.objects.filter(pk=sent.pk).update(store_timestamp=limit + 1)
    DeliveryEvent.objects.filter(pk=event.pk).update(timestamp=limit + 1)
    more = archive_export(now_ms=limit + SEGMENT_MS + LAG_MS, prune=False)
    assert (more.segments, more.adopted) == (1, 0)
    now_archived = archive_rows(spark, uri)
    offsets = [r[0] for r in now_archived["commit_log"]]
    assert len(offsets) == len(set(offsets)) == len(expected["commit_log"]) + 1
    ids = [r[0] for r in now_archived["delivery_events"]]
    assert len(ids) == len(set(ids)) == len(expected["delivery_events"]) + 1


@pytest.mark.django_db(transaction=True)
def test_a_segment_the_database_holds_more_of_is_written_again_not_adopted(
    spark, settings, tmp_path
):
    """A manifest is adopted only when the database holds no more rows in its range than it
    records (a restored database holds the same or fewer): otherwise the archive is not this
    database's past, and the export writes the segment from the database as before."""
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    broker_round("a")
    logs_age(50 * MINUTE_MS)
    now = now_ms()
    written = archive_export(now_ms=now, prune=False).segments
    assert written >= 1  # one, unless round a crossed a segment's boundary
    segment = ArchiveSegment.objects.first()
    TransactionEvent.objects.create(
        transaction_id="late", kind="resumed", timestamp=segment.start_timestamp
    )
    ArchiveSegment.objects.all().delete()
    ArchiveWatermark.objects.update(archived_until_timestamp=0)

    result = archive_export(now_ms=now, prune=False)
    assert (result.segments, result.adopted) == (written, 0)
    archived = archive_rows(spark, uri)
    assert any(r[1] == "late" for r in archived["transaction_events"])
    for table in ARCHIVE_TABLES:
        recorded = sum(s.rows[table] for s in ArchiveSegment.objects.all())
        assert recorded == len(archived[table]), table

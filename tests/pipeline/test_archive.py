"""The archive export (broker.services.archive): closed segments of every log to Parquet, the
watermark, and what each table's columns hold. One history, exported in two steps, serves most
assertions (each Spark write costs about a second)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from broker.constants import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from broker.models import (
    ArchiveSegment,
    ArchiveWatermark,
    DeliveryEvent,
    Message,
    Resolution,
    TransactionEvent,
)
from broker.pipeline import archive_io
from broker.pipeline.archive_io import table_read
from broker.pipeline.schema import ARCHIVE_TABLES, TIME_COLUMNS, ddl, segment_path
from broker.rules.clock import now_ms
from broker.rules.op_body import op_body_parse
from broker.services.archive.export import archive_export, archive_export_due
from broker.services.archive.rows import READERS, TIME_MODELS
from broker.services.archive.segments import closed_until, segment_start
from tests.pipeline.archive_support import MINUTE_MS, broker_round, broker_setup, logs_age

SEGMENT_MS = 600_000
LAG_MS = 60_000


def _db_times(table: str) -> list[int]:
    column = TIME_COLUMNS[table]
    return list(TIME_MODELS[table].objects.values_list(column, flat=True))


def _db_segments(below: int) -> set[int]:
    """The starts of the segments holding any row of any log stored before ``below``."""
    return {
        segment_start(t, SEGMENT_MS)
        for table in ARCHIVE_TABLES
        for t in _db_times(table)
        if t < below
    }


def _ids(spark, uri: str, table: str, **bounds) -> list:
    key = {"commit_log": "commit_log_offset", "resolutions": "transaction_id"}.get(table, "id")
    return sorted(
        r[0] for r in table_read(spark, uri=uri, table=table, **bounds).select(key).collect()
    )


def _db_ids(table: str, below: int, at_or_after: int = 0) -> list:
    model = TIME_MODELS[table]
    key = {"commit_log": "commit_log_offset", "resolutions": "transaction_id"}.get(table, "id")
    column = TIME_COLUMNS[table]
    qs = model.objects.filter(**{f"{column}__lt": below, f"{column}__gte": at_or_after})
    return sorted(qs.values_list(key, flat=True))


def _part_files(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file()}


def test_every_archive_table_has_a_reader_and_its_time_column_a_field():
    assert READERS.keys() == TIME_MODELS.keys() == ARCHIVE_TABLES.keys()
    for table, model in TIME_MODELS.items():
        assert model._meta.get_field(TIME_COLUMNS[table])


def test_closed_segments_and_their_alignment():
    assert segment_start(1_234_567, SEGMENT_MS) == 1_200_000
    # [1_200_000, 1_800_000) is closed once 1_800_000 + lag has passed, not before.
    assert closed_until(now_ms=1_860_000, segment_ms=SEGMENT_MS, lag_ms=LAG_MS) == 1_800_000
    assert closed_until(now_ms=1_859_999, segment_ms=SEGMENT_MS, lag_ms=LAG_MS) == 1_200_000
    assert (
        closed_until(now_ms=9_000_000, segment_ms=SEGMENT_MS, lag_ms=LAG_MS, until_ms=2_500_000)
        == 2_400_000
    )


@pytest.mark.django_db
def test_export_writes_exactly_the_closed_segments_once(spark, settings, tmp_path):
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    broker_round("a")
    logs_age(30 * MINUTE_MS)  # an empty stretch of segments follows, skipped
    newest = broker_round("c")
    now = now_ms()
    limit = closed_until(now_ms=now, segment_ms=SEGMENT_MS, lag_ms=LAG_MS)
    expected_segments = _db_segments(limit)
    assert expected_segments

    assert archive_export_due(now_ms=now) == len(expected_segments)

    # The watermark is at the last closed segment; the open one (within the lag) is not out.
    mark = ArchiveWatermark.objects.get(name="logs")
    assert mark.archived_until_timestamp == limit
    assert {s.start_timestamp for s in ArchiveSegment.objects.all()} == expected_segments
    newest_half = Message.objects.get(msg_id=newest.committed, topic=HALF_TOPIC)
    assert newest_half.store_timestamp >= limit
    for table in ARCHIVE_TABLES:
        assert _ids(spark, uri, table) == _db_ids(table, limit), table
        assert _ids(spark, uri, table)  # every table has rows in the closed segments

    # Each segment directory holds exactly its time range's rows, with _SUCCESS, in place.
    for segment in ArchiveSegment.objects.all():
        s, e = segment.start_timestamp, segment.end_timestamp
        assert e - s == SEGMENT_MS
        for table in ARCHIVE_TABLES:
            path = segment_path(uri, table, s)
            expected = _db_ids(table, e, s)
            assert segment.rows[table] == len(expected)
            if not expected:
                assert not Path(path).exists()
                continue
            assert (Path(path) / "_SUCCESS").exists()
            times = spark.read.schema(ddl(table)).parquet(path).select(TIME_COLUMNS[table])
            assert all(s <= r[0] < e for r in times.collect())
            assert _ids(spark, uri, table, from_ms=s, to_ms=e) == expected
    assert not (Path(uri) / "_tmp").exists() or not any((Path(uri) / "_tmp").rglob("*.parquet"))

    # A re-run finds nothing new and rewrites nothing.
    files = _part_files(uri)
    assert archive_export_due(now_ms=now) == 0
    assert _part_files(uri) == files
    assert ArchiveWatermark.objects.get(name="logs").archived_until_timestamp == limit

    # Later, the last segment is closed and exported too: the archive holds every row.
    later = now + SEGMENT_MS + LAG_MS
    result = archive_export(now_ms=later, prune=False)
    assert result.segments == len(_db_segments(later)) - len(expected_segments) >= 1
    for table in ARCHIVE_TABLES:
        assert _ids(spark, uri, table) == _db_ids(table, later), table
    _columns_hold_the_logs(spark, uri, newest)


def _columns_hold_the_logs(spark, uri: str, newest) -> None:
    """The derived columns: half and discard properties, parsed Op bodies, body sizes,
    properties and details as JSON, the journals' kinds."""
    log = {r.commit_log_offset: r for r in table_read(spark, uri=uri, table="commit_log").collect()}
    for m in Message.objects.all():
        row = log[m.commit_log_offset]
        assert row.body_size == len(bytes(m.body))
        assert json.loads(row.properties) == m.properties
        assert (row.topic, row.queue_offset, row.msg_id) == (m.topic, m.queue_offset, m.msg_id)
        assert row.prepared_transaction_offset == m.prepared_transaction_offset
        # Half messages and their discard copies carry REAL_TOPIC and REAL_QID.
        if m.topic in (HALF_TOPIC, CHECK_MAX_TIME_TOPIC):
            assert row.real_topic == "TranTest"
            assert row.real_queue_id == int(m.properties["REAL_QID"])
        else:
            assert row.real_topic is None and row.real_queue_id is None
        if m.topic == OP_HALF_TOPIC:
            assert list(row.op_offsets) == op_body_parse(bytes(m.body)).offsets
        else:
            assert row.op_offsets is None
        if m.topic == CHECK_MAX_TIME_TOPIC:
            assert row.discard_reason == "check_max"
            assert row.half_queue_offset == int(m.properties["HALF_QUEUE_OFFSET"])
    assert "body" not in table_read(spark, uri=uri, table="commit_log").columns

    events = table_read(spark, uri=uri, table="transaction_events").collect()
    refused = [e for e in events if e.kind == "end_refused"]
    assert len(refused) == TransactionEvent.objects.filter(kind="end_refused").count() == 2
    assert json.loads(refused[0].detail)["state"] == "DISCARDED"
    assert {r.action for r in table_read(spark, uri=uri, table="resolutions").collect()} == {
        "COMMIT",
        "ROLLBACK",
    }
    assert Resolution.objects.count() == 4
    kinds = {r.kind for r in table_read(spark, uri=uri, table="delivery_events").collect()}
    assert kinds == {"delivered", "acked", "dead_lettered"}
    dead = DeliveryEvent.objects.filter(kind="dead_lettered").count()
    assert dead == Message.objects.filter(topic="%DLQ%D").count() == 4  # 2 messages a round


@pytest.mark.django_db
def test_the_watermark_stays_when_a_segment_fails(spark, settings, tmp_path, monkeypatch, capsys):
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    broker_round("a")
    logs_age(30 * MINUTE_MS)
    written = []

    def failing_write(spark, df, *, uri, table, start_ms, files=1):
        if table == "transaction_events":
            raise OSError("disk full")
        written.append(table)
        return original(spark, df, uri=uri, table=table, start_ms=start_ms, files=files)

    original = archive_io.segment_write
    monkeypatch.setattr(archive_io, "segment_write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        archive_export_due(now_ms=now_ms())
    assert written == ["commit_log", "resolutions"]
    mark = ArchiveWatermark.objects.get(name="logs")
    assert mark.archived_until_timestamp == 0
    assert not ArchiveSegment.objects.exists()
    # The lease was given back: the next run (the command, up to the end of the first segment)
    # writes the segment whole.
    monkeypatch.setattr(archive_io, "segment_write", original)
    until = segment_start(min(_db_times("commit_log")), SEGMENT_MS) + SEGMENT_MS
    iso = datetime.fromtimestamp(until / 1000, tz=UTC).isoformat()
    call_command("archive", "--until", iso, "--no-prune")
    out = capsys.readouterr().out
    assert "segments written: 1\n" in out
    assert f"commit_log: {len(_db_ids('commit_log', until))}\n" in out
    assert ArchiveWatermark.objects.get(name="logs").archived_until_timestamp == until
    assert ArchiveSegment.objects.get().start_timestamp == until - SEGMENT_MS
    for table in ARCHIVE_TABLES:
        assert _ids(spark, uri, table) == _db_ids(table, until), table


@pytest.mark.django_db
def test_a_watermark_inside_a_segment_is_exported_up_to_the_next_boundary_only(
    spark, settings, tmp_path
):
    """After HALFMOON_ARCHIVE_SEGMENT_MS changed, the watermark may sit inside a segment: the
    export writes from it up to the next aligned boundary, never into a segment still open."""
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    broker_round("a")
    first = min(t for table in ARCHIVE_TABLES for t in _db_times(table))
    start = segment_start(first, SEGMENT_MS)
    end = start + SEGMENT_MS
    mark = start + 1  # unaligned (a row at exactly start would count as archived already)
    ArchiveWatermark.objects.update_or_create(
        name="logs", defaults={"archived_until_timestamp": mark}
    )
    now = end + LAG_MS  # the segment [start, end) has just closed; the next one is open

    archive_export(now_ms=now, prune=False)

    assert ArchiveWatermark.objects.get(name="logs").archived_until_timestamp == end
    (segment,) = ArchiveSegment.objects.all()
    assert (segment.start_timestamp, segment.end_timestamp) == (mark, end)
    for table in ARCHIVE_TABLES:
        assert _ids(spark, uri, table) == _db_ids(table, end, mark), table

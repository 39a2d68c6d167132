"""The commit log columns added with delay/timer messages and FIFO (``message_group``,
``delivery_timestamp``, ``timer_del_uniq_key``): what the export reads from the database, and
segments written before them reading as null beside new ones, in the job's reader and in the
DuckDB baseline's."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from broker.constants import TIMER_TOPIC
from broker.models import Message
from broker.pipeline.archive_io import segment_write, table_read
from broker.pipeline.arrow import arrow_table
from broker.pipeline.schema import ADDED_COLUMNS, ARCHIVE_TABLES
from broker.rules.anomalies import HOUR_MS
from broker.rules.clock import now_ms
from broker.services.archive.rows import segment_tables
from broker.services.commitlog.messages import message_send
from broker.services.timers.recall import scheduled_message_recall
from broker.services.timers.schedule import message_send_at
from broker.services.topology.writes import topic_create
from tests.pipeline.archive_builder import ArchiveBuilder

BENCH = Path(__file__).resolve().parents[2] / "bench"
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS


@pytest.mark.django_db
def test_the_export_reads_message_group_due_time_and_recall_markers():
    topic_create(name="Orders", queue_nums=1)
    before = now_ms()
    fifo = message_send(topic="Orders", body=b"a")
    Message.objects.filter(pk=fifo.pk).update(message_group="order-7")  # a FIFO send's row
    due = before + HOUR_MS
    scheduled = message_send_at(delivery_timestamp=due, topic="Orders", body=b"b")
    scheduled_message_recall(topic="Orders", msg_id=scheduled.msg_id, recalled_by="p:1")
    (data,) = segment_tables("commit_log", before - 1, now_ms() + 1)
    rows = {r["commit_log_offset"]: r for r in data.to_pylist()}
    assert rows[fifo.commit_log_offset]["message_group"] == "order-7"
    assert rows[fifo.commit_log_offset]["delivery_timestamp"] is None
    waiting = rows[scheduled.commit_log_offset]
    assert (waiting["topic"], waiting["real_topic"]) == (TIMER_TOPIC, "Orders")
    assert (waiting["delivery_timestamp"], waiting["timer_del_uniq_key"]) == (due, None)
    assert waiting["message_group"] == ""
    (marker,) = [r for r in rows.values() if r["timer_del_uniq_key"]]
    assert marker["timer_del_uniq_key"] == f"Orders+{scheduled.msg_id}"
    assert (marker["topic"], marker["delivery_timestamp"]) == (TIMER_TOPIC, due)
    assert data.column_names == [name for name, _ in ARCHIVE_TABLES["commit_log"]]


def test_segments_written_before_the_new_columns_read_as_null(spark, tmp_path):
    """One segment in the old layout (no added columns) and one in the new: both readers give
    every column, null in the old segment's rows."""
    b = ArchiveBuilder(start_ms=T0)
    b.normal_message("old-1", at=T0 + 1_000)
    new = b.scheduled("new-1", at=T0 + HOUR_MS + 1_000, due=T0 + HOUR_MS + 60_000)
    rows = b.tables()["commit_log"]
    added = ADDED_COLUMNS["commit_log"]
    old_table = arrow_table("commit_log", [r for r in rows if r[4] == "old-1"])
    old_table = old_table.drop_columns(list(added))
    new_table = arrow_table("commit_log", [r for r in rows if r[4] == "new-1"])
    uri = str(tmp_path)
    for start, table in ((T0, old_table), (T0 + HOUR_MS, new_table)):
        segment_write(
            spark, spark.createDataFrame(table), uri=uri, table="commit_log", start_ms=start
        )

    read = {r["msg_id"]: r for r in table_read(spark, uri=uri, table="commit_log").collect()}
    assert read["old-1"]["delivery_timestamp"] is None
    assert read["old-1"]["message_group"] is None
    assert read["new-1"]["delivery_timestamp"] == new.delivery_ms

    sys.path.insert(0, str(BENCH))
    try:
        import duckdb
        from reconcile_same_work import _source

        # An archive wholly in the old layout too (no file has the columns).
        only_old = str(tmp_path / "only-old")
        segment_write(
            spark, spark.createDataFrame(old_table), uri=only_old, table="commit_log", start_ms=T0
        )
        con = duckdb.connect()
        try:
            got, got_old = (
                con.execute(
                    f"SELECT msg_id, message_group, delivery_timestamp, timer_del_uniq_key "
                    f"FROM {_source(at, 'commit_log', T0, T0 + 2 * HOUR_MS)} ORDER BY msg_id"
                ).fetchall()
                for at in (uri, only_old)
            )
        finally:
            con.close()
        assert got == [("new-1", "", new.delivery_ms, None), ("old-1", None, None, None)]
        assert got_old == [("old-1", None, None, None)]
    finally:
        sys.path.remove(str(BENCH))
    assert pc.sum(new_table["delivery_timestamp"]).as_py() == new.delivery_ms

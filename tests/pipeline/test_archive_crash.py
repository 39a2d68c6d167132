"""An export killed at any point and run again gives the same archive as an uninterrupted one.
The export runs in a child process (``os._exit`` at a chosen point: the
kill hook is this test's, wrapped around the export's own steps) over the committed history of
this test's database, then in this process; the whole archive is read back and compared with an
uninterrupted export of the same history to another URI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from broker.models import ArchiveSegment, ArchiveWatermark, ScanLease
from broker.pipeline.schema import ARCHIVE_TABLES, segment_path
from broker.rules.clock import now_ms
from broker.services.archive.export import LEASE_NAME, archive_export
from broker.services.archive.segments import closed_until
from tests.e2e.processes import ROOT, broker_env
from tests.pipeline.archive_support import (
    MINUTE_MS,
    archive_rows,
    broker_round,
    broker_setup,
    logs_age,
)

KILLED = 17

# The child: the export with a hook that exits the process on the n-th pass of a point.
CHILD = f"""
import os, sys
import django

django.setup()
from broker.pipeline import archive_io
from broker.pipeline.spark import HadoopFiles
from broker.services.archive import export

point, n, now = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
passes = []


def hit():
    passes.append(point)
    if len(passes) == n:
        os._exit({KILLED})


if point == "tmp_written":  # a segment is written under _tmp, not yet renamed into place
    rename = HadoopFiles.rename

    def killing_rename(self, source, target):
        hit()
        return rename(self, source, target)

    HadoopFiles.rename = killing_rename
elif point == "table_renamed":  # a table's segment is in place, the next table's is not
    write = archive_io.segment_write

    def killing_write(*args, **kwargs):
        out = write(*args, **kwargs)
        hit()
        return out

    archive_io.segment_write = killing_write
elif point == "segment_renamed":  # every table of a segment in place, no manifest yet
    write_manifest = archive_io.manifest_write

    def killing_manifest(*args, **kwargs):
        hit()
        return write_manifest(*args, **kwargs)

    archive_io.manifest_write = killing_manifest
elif point == "manifest_written":  # the segment and its manifest in place, the watermark not moved
    commit = export._segment_commit

    def killing_commit(**kwargs):
        hit()
        return commit(**kwargs)

    export._segment_commit = killing_commit
export.archive_export(now_ms=now, prune=False)
"""


def _export_killed(env: dict[str, str], point: str, n: int, now: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, point, str(n), str(now)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == KILLED, f"{point}: exit {done.returncode}\n{done.stderr[-3000:]}"


def _lease_expire() -> None:
    """What the lease's TTL does for a dead exporter, without waiting for it."""
    ScanLease.objects.filter(name=LEASE_NAME).update(expires_timestamp=0)


def _watermark() -> int:
    return ArchiveWatermark.objects.get(name="logs").archived_until_timestamp


def _tmp_files(uri: str) -> list[Path]:
    return [p for p in (Path(uri) / "_tmp").rglob("*") if p.is_file()]


def _manifests(uri: str) -> set[int]:
    """The starts of the segments whose manifest is in place."""
    return {int(p.stem) for p in (Path(uri) / "_segments").glob("*.json")}


def _files(uri: str) -> dict[str, int]:
    """Every file in place (not under ``_tmp``) and its modification time (ns)."""
    return {
        str(p.relative_to(uri)): p.stat().st_mtime_ns
        for p in Path(uri).rglob("*")
        if p.is_file() and not str(p.relative_to(uri)).startswith("_tmp/")
    }


def _segments(uri: str) -> set[str]:
    """The segments in place (with their ``_SUCCESS``), not those being written."""
    done = (str(p.parent.relative_to(uri)) for p in Path(uri).rglob("_SUCCESS"))
    return {path for path in done if not path.startswith("_tmp/")}


@pytest.mark.django_db(transaction=True)
def test_an_export_killed_anywhere_and_run_again_gives_the_same_archive(spark, settings, tmp_path):
    broker_setup()
    broker_round("a")
    logs_age(50 * MINUTE_MS)
    broker_round("b")
    logs_age(25 * MINUTE_MS)
    now = now_ms()
    crashed, whole = str(tmp_path / "crashed"), str(tmp_path / "whole")
    db = connection.settings_dict
    env = broker_env(
        database_url=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        redis_url=settings.REDIS_URL,
        var_dir=tmp_path / "var",
        settings={
            "DJANGO_SETTINGS_MODULE": "halfmoon.settings_test",
            "HALFMOON_ARCHIVE_URI": crashed,
            "HALFMOON_SPARK_MASTER": "local[1]",
            "HALFMOON_SPARK_DRIVER_MEMORY": "512m",
            "HALFMOON_DB_POOL": "0",
        },
    )

    # 1. Killed with the first table of the first segment under _tmp.
    _export_killed(env, "tmp_written", 1, now)
    assert _tmp_files(crashed)
    assert not _segments(crashed)
    assert _watermark() == 0
    # The dead exporter's lease holds until it expires: no second export meanwhile.
    settings.HALFMOON_ARCHIVE_URI = crashed
    assert archive_export(now_ms=now, prune=False).skipped
    _lease_expire()

    # 2. Killed between tables: two tables of the first segment in place, not the rest.
    leftover = _tmp_files(crashed)
    _export_killed(env, "table_renamed", 2, now)
    assert not set(leftover) & set(_tmp_files(crashed))  # the first crash's _tmp was cleaned
    assert len(_segments(crashed)) == 2
    assert _watermark() == 0
    _lease_expire()

    # 3. Killed with the second segment in place but neither its manifest written nor it
    # recorded: the next run writes it again.
    _export_killed(env, "segment_renamed", 2, now)
    first = ArchiveSegment.objects.get()
    assert _watermark() == first.end_timestamp
    second = first.end_timestamp  # the next segment with rows starts at or after it
    assert len(_segments(crashed)) > len(ARCHIVE_TABLES)
    assert _manifests(crashed) == {first.start_timestamp}
    _lease_expire()

    # 3b. Killed with the second segment (written again) and its manifest in place, not
    # recorded: the next run adopts it rather than writing it a third time.
    _export_killed(env, "manifest_written", 1, now)
    assert _watermark() == first.end_timestamp
    (adoptable,) = _manifests(crashed) - {first.start_timestamp}
    assert adoptable >= second
    _lease_expire()

    # 4. Run again here to the end.
    files = _files(crashed)
    result = archive_export(now_ms=now, prune=False)
    assert result.adopted == 1
    assert min(s.start_timestamp for s in ArchiveSegment.objects.all()) == first.start_timestamp
    assert ArchiveSegment.objects.filter(start_timestamp__gte=second).count() == (
        result.segments + 1
    )
    adopted = ArchiveSegment.objects.get(start_timestamp=adoptable)
    assert sum(adopted.rows.values()) > 0
    for path, mtime in files.items():  # the adopted segment was not written again
        if f"segment={adoptable}/" in path:
            assert _files(crashed)[path] == mtime
    limit = closed_until(now_ms=now, segment_ms=600_000, lag_ms=60_000)
    assert _watermark() == limit
    assert not _tmp_files(crashed)

    # The same history exported in one go elsewhere.
    settings.HALFMOON_ARCHIVE_URI = whole
    ArchiveWatermark.objects.update(archived_until_timestamp=0)
    ArchiveSegment.objects.all().delete()
    assert archive_export(now_ms=now, prune=False).segments == ArchiveSegment.objects.count()

    assert _segments(crashed) == _segments(whole)
    assert (
        _manifests(crashed)
        == _manifests(whole)
        == {s.start_timestamp for s in ArchiveSegment.objects.all()}
    )
    crashed_rows, whole_rows = archive_rows(spark, crashed), archive_rows(spark, whole)
    for table in ARCHIVE_TABLES:
        assert crashed_rows[table] == whole_rows[table], table
        assert len(whole_rows[table]) > 0
    for segment in ArchiveSegment.objects.all():
        for table, rows in segment.rows.items():
            path = Path(segment_path(whole, table, segment.start_timestamp))
            assert path.exists() == (rows > 0)

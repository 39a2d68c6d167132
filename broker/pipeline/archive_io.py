"""Writing and reading archive segments (layout: ``broker.pipeline.schema``), for the export
(``broker.services.archive``), the reconciliation job, the tests' and the bench's archives.

A segment is written whole under ``_tmp`` (Spark's committer adds ``_SUCCESS`` once every file
is written), then an older copy at the target, if any, is deleted and the new one renamed into
place. A reader lists a table's directory, which holds only renamed, complete segments; a crash
at any step leaves at most a ``_tmp`` directory (cleaned by the next export) or no segment at
the target, which the next export, whose watermark did not advance, writes again.

Once every table of a segment is in place, its manifest (``broker.rules.archive_manifest``) is
written under ``_tmp`` and renamed to ``{uri}/_segments/{start_ms}.json``: a segment with a
manifest is whole, and a database whose watermark is behind it adopts it instead of writing it.
"""

from __future__ import annotations

import logging
import secrets

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from broker.pipeline.schema import (
    SORT_COLUMNS,
    TIME_COLUMNS,
    TMP_DIR,
    archive_root,
    ddl,
    manifest_dir,
    manifest_path,
    manifest_tmp_path,
    segment_path,
    segment_tmp_path,
    table_path,
)
from broker.pipeline.spark import HadoopFiles
from broker.rules.archive_manifest import SegmentManifest, manifest_format, manifest_parse

logger = logging.getLogger("halfmoon.archive")


def segment_write(
    spark: SparkSession, df: DataFrame, *, uri: str, table: str, start_ms: int, files: int = 1
) -> str:
    """Write ``df`` (the rows of ``table`` whose time column falls in the segment starting at
    ``start_ms``) as that segment: sorted by ``SORT_COLUMNS`` into ``files`` Parquet files
    under a fresh ``_tmp`` path, then renamed into place, replacing an earlier copy.

    Args:
        df: with exactly the columns of ``ARCHIVE_TABLES[table]``, in order.
        files: Parquet files in the segment (1 keeps a segment's rows in one sorted file).

    Returns:
        the segment's final path.

    Raises:
        OSError: the file system refused the rename.
    """
    fs = HadoopFiles(spark)
    tmp = segment_tmp_path(uri, table, start_ms, secrets.token_hex(6))
    target = segment_path(uri, table, start_ms)
    out = df.sort(*SORT_COLUMNS[table])
    out = out.coalesce(files) if files == 1 else out.repartition(files, *SORT_COLUMNS[table][:1])
    out.write.mode("errorifexists").parquet(tmp)
    if fs.exists(target):
        fs.delete(target)
    fs.rename(tmp, target)
    return target


def tmp_clean(spark: SparkSession, uri: str) -> bool:
    """Delete what crashed exports left under ``{uri}/_tmp`` (call only when no export runs:
    the export holds the archive lease). Returns whether anything was there."""
    return HadoopFiles(spark).delete(f"{archive_root(uri)}/{TMP_DIR}")


def manifest_write(spark: SparkSession, manifest: SegmentManifest, *, uri: str) -> str:
    """Write the manifest of a segment whose every table is in place: under ``_tmp``, then
    renamed to ``{uri}/_segments/{start_ms}.json``, replacing an earlier one. Returns its path.

    Raises:
        OSError: the file system refused the rename.
    """
    fs = HadoopFiles(spark)
    tmp = manifest_tmp_path(uri, manifest.start_ms, secrets.token_hex(6))
    target = manifest_path(uri, manifest.start_ms)
    fs.write_text(tmp, manifest_format(manifest))
    if fs.exists(target):
        fs.delete(target)
    fs.rename(tmp, target)
    return target


def manifests_read(spark: SparkSession, *, uri: str, from_ms: int) -> list[SegmentManifest]:
    """The manifests of the segments starting at or after ``from_ms`` (ms), in time order. A
    file that does not parse is logged and skipped (its segment is then written again)."""
    fs = HadoopFiles(spark)
    out = []
    for path in fs.list_files(manifest_dir(uri)):
        name = path.rsplit("/", 1)[-1]
        stem = name.removesuffix(".json")
        if not name.endswith(".json") or not stem.isdigit() or int(stem) < from_ms:
            continue
        try:
            out.append(manifest_parse(fs.read_text(path)))
        except ValueError as exc:
            logger.warning("archive manifest %s skipped: %s", path, exc)
    return sorted(out, key=lambda m: m.start_ms)


def empty_frame(spark: SparkSession, table: str) -> DataFrame:
    """An empty DataFrame with ``table``'s columns."""
    return spark.createDataFrame([], ddl(table))


def table_read(
    spark: SparkSession,
    *,
    uri: str,
    table: str,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> DataFrame:
    """The rows of ``table`` in the archive whose time column (``TIME_COLUMNS``) is in
    ``[from_ms, to_ms)`` (either end open when None), with the archive's columns only (the
    ``date``/``hour``/``segment`` partition columns are used for pruning, then dropped).

    A table not yet written reads as empty.
    """
    path = table_path(uri, table)
    if not HadoopFiles(spark).exists(path):
        return empty_frame(spark, table)
    df = spark.read.schema(ddl(table) + ", date string, hour int, segment bigint").parquet(path)
    time_col = F.col(TIME_COLUMNS[table])
    if from_ms is not None:
        # A segment holds one hour at most, so any segment that can hold from_ms starts at or
        # after from_ms minus an hour: prune by directory first, then filter the rows.
        df = df.where(F.col("segment") >= from_ms - 3_600_000).where(time_col >= from_ms)
    if to_ms is not None:
        df = df.where(F.col("segment") < to_ms).where(time_col < to_ms)
    return df.drop("date", "hour", "segment")

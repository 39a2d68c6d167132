"""The archive of the journals to Parquet: its watermark and its segments."""

from __future__ import annotations

from django.db import models

from broker.rules.clock import now_ms

ARCHIVE_WATERMARK = "logs"
"""The watermark row's name (the commit log, the journals and the Op messages share one)."""


class ArchiveWatermark(models.Model):
    """How far the logs are archived (``broker.services.archive``): every row stored before
    ``archived_until_timestamp`` (ms) is in a complete segment of the archive, and rows before
    ``pruned_until_timestamp`` that were final are gone from the database. One row, ``ARCHIVE_WATERMARK``;
    it advances only after a segment is in place with its ``_SUCCESS`` marker."""

    name = models.CharField(max_length=16, primary_key=True)
    archived_until_timestamp = models.BigIntegerField(default=0)
    pruned_until_timestamp = models.BigIntegerField(default=0)
    updated_timestamp = models.BigIntegerField(default=now_ms)

    def __str__(self) -> str:
        return f"{self.name} archived to {self.archived_until_timestamp}"


class ArchiveSegment(models.Model):
    """One archived time segment ``[start_timestamp, end_timestamp)`` (ms) of every log, written
    under ``uri`` (HALFMOON_ARCHIVE_URI at the time), with its row count per archive table
    (``broker.pipeline.schema.ARCHIVE_TABLES``)."""

    start_timestamp = models.BigIntegerField(primary_key=True)
    end_timestamp = models.BigIntegerField()
    uri = models.CharField(max_length=1024)
    rows = models.JSONField(default=dict, help_text="Rows per archive table")
    archived_timestamp = models.BigIntegerField(default=now_ms)
    duration_ms = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["start_timestamp"]

    def __str__(self) -> str:
        return f"segment {self.start_timestamp}-{self.end_timestamp}"

"""The archive's watermark: one ``ArchiveWatermark`` row, named ``ARCHIVE_WATERMARK``, saying how far
the Parquet archive reaches (``archived_until_timestamp``: every closed segment below it is
written) and how far the database has been pruned below it (``pruned_until_timestamp``). The
export moves the first, the prune the second, the reconciliation reads the first; each only
ever moves forward, so a late or repeated writer never moves it back."""

from __future__ import annotations

from broker.models import ARCHIVE_WATERMARK, ArchiveWatermark
from broker.rules.clock import now_ms as clock_ms


def archived_until_ms() -> int:
    """How far the archive reaches (ms since the epoch; 0 before the first segment). Makes the
    row on first use."""
    mark, _ = ArchiveWatermark.objects.get_or_create(name=ARCHIVE_WATERMARK)
    return mark.archived_until_timestamp


def archived_until_or_none() -> int | None:
    """How far the archive reaches (ms), or None when no export has run yet; reads only."""
    return (
        ArchiveWatermark.objects.filter(name=ARCHIVE_WATERMARK)
        .values_list("archived_until_timestamp", flat=True)
        .first()
    )


def archived_until_advance(to_ms: int) -> None:
    """Move ``archived_until_timestamp`` forward to ``to_ms`` (ms; never back)."""
    ArchiveWatermark.objects.filter(
        name=ARCHIVE_WATERMARK, archived_until_timestamp__lt=to_ms
    ).update(archived_until_timestamp=to_ms, updated_timestamp=clock_ms())


def pruned_until_advance(to_ms: int) -> None:
    """Move ``pruned_until_timestamp`` forward to ``to_ms`` (ms; never back)."""
    ArchiveWatermark.objects.filter(
        name=ARCHIVE_WATERMARK, pruned_until_timestamp__lt=to_ms
    ).update(pruned_until_timestamp=to_ms)

"""The archive of the logs (issue 8): closed time segments of the commit log and the
resolution, check and delivery journals exported to Parquet under HALFMOON_ARCHIVE_URI
(``export``: ``archive_export_due``, the beat task's, and ``archive_export``), the rows read
from the database for it (``rows``), and the prune of the hot database behind it (``prune``:
``archive_prune``). Layout and guarantees: ``docs/archive.md``."""

from broker.services.archive.export import ArchiveExport, archive_export, archive_export_due
from broker.services.archive.prune import archive_prune

__all__ = ["ArchiveExport", "archive_export", "archive_export_due", "archive_prune"]

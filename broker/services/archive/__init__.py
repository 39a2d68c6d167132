"""The archive of the logs: closed time segments of the commit log and the resolution, check
and delivery journals exported to Parquet under HALFMOON_ARCHIVE_URI (``export``:
``archive_export_due``, the beat task's, and ``archive_export``), the rows read from the
database for it (``rows``), the watermark saying how far it reaches (``watermark``), and the
prune of the hot database behind it (``prune``: ``archive_prune``). Layout and guarantees:
``docs/archive.md``. Import the modules themselves: ``export`` loads Spark, which only the
pipeline worker needs."""

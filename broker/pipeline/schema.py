"""The archive's layout and its tables: the one definition the export
(``broker.services.archive``), the reconciliation job and the one-process baseline read.

Layout under HALFMOON_ARCHIVE_URI::

    {uri}/{table}/date=YYYY-MM-DD/hour=HH/segment={start_ms}/part-*.parquet   (+ _SUCCESS)
    {uri}/_tmp/{table}/segment={start_ms}-{token}/                          (being written)
    {uri}/_segments/{start_ms}.json                  (a segment's manifest, once it is in place)
    {uri}/reconciliation/run={id}/{facts,anomalies,buckets,analytics}/       (job output)

More: docs/design.md, "Module notes", broker/pipeline/schema.py."""

from __future__ import annotations

from datetime import UTC, datetime

# (column, Spark SQL type) per table, in file order.
ARCHIVE_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    # Every message of the commit log (broker.models.Message): half, Op, delivered, discarded,
    # DLQ and normal messages.
    "commit_log": (
        ("commit_log_offset", "bigint"),
        ("topic", "string"),
        ("queue_id", "int"),
        ("queue_offset", "bigint"),
        ("msg_id", "string"),
        ("producer_group", "string"),
        ("tags", "string"),
        ("keys", "string"),
        ("sys_flag", "int"),
        ("born_timestamp", "bigint"),
        ("store_timestamp", "bigint"),
        ("prepared_transaction_offset", "bigint"),  # delivered commits: the half's offset
        ("real_topic", "string"),  # half messages: REAL_TOPIC
        ("real_queue_id", "int"),  # half messages: REAL_QID
        ("discard_reason", "string"),  # TRANS_CHECK_MAX_TIME_TOPIC copies: DISCARD_REASON
        ("half_queue_offset", "bigint"),  # discard copies: HALF_QUEUE_OFFSET
        ("op_offsets", "array<bigint>"),  # Op messages: the half queue offsets they name
        ("body_size", "int"),
        ("properties", "string"),  # JSON object
        # Added with delay/timer messages and FIFO (issue 38); segments written before them
        # read these as null (``broker.pipeline.archive_io.table_read``).
        ("message_group", "string"),  # FIFO messages: the message group ("" for none)
        ("delivery_timestamp", "bigint"),  # delay/timer messages and their copies: TIMER_DELIVER_MS
        ("timer_del_uniq_key", "string"),  # recall markers: TIMER_DEL_UNIQKEY ("topic+msg_id")
    ),
    # The resolution journal (broker.models.Resolution): one row per commit or rollback.
    "resolutions": (
        ("transaction_id", "string"),
        ("half_queue_id", "int"),
        ("half_queue_offset", "bigint"),
        ("action", "string"),  # COMMIT | ROLLBACK
        ("resolved_by", "string"),  # producer | check | operator
        ("reason", "string"),
        ("resolved_timestamp", "bigint"),
    ),
    # The check and operator journal (broker.models.TransactionEvent).
    "transaction_events": (
        ("id", "bigint"),
        ("transaction_id", "string"),
        ("kind", "string"),
        ("timestamp", "bigint"),
        ("check_times", "int"),
        ("outcome", "string"),
        ("actor", "string"),
        ("detail", "string"),  # JSON object
    ),
    # The delivery journal (broker.models.DeliveryEvent): deliveries, acks, dead letters.
    "delivery_events": (
        ("id", "bigint"),
        ("consumer_group", "string"),
        ("topic", "string"),
        ("queue_id", "int"),
        ("queue_offset", "bigint"),
        ("commit_log_offset", "bigint"),
        ("msg_id", "string"),
        ("kind", "string"),
        ("delivery_attempt", "int"),
        ("timestamp", "bigint"),
    ),
}

# The column each table is segmented by (ms since the epoch).
TIME_COLUMNS: dict[str, str] = {
    "commit_log": "store_timestamp",
    "resolutions": "resolved_timestamp",
    "transaction_events": "timestamp",
    "delivery_events": "timestamp",
}

# Rows of each table are written sorted by these, so a re-exported segment holds the same rows
# in the same order.
SORT_COLUMNS: dict[str, tuple[str, ...]] = {
    "commit_log": ("commit_log_offset",),
    "resolutions": ("half_queue_id", "half_queue_offset", "transaction_id", "resolved_timestamp"),
    "transaction_events": ("id",),
    "delivery_events": ("id",),
}

# Columns added after the archive's first layout: a Parquet file written before them lacks them,
# and every reader (the job, the baselines) reads them as null there.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "commit_log": ("message_group", "delivery_timestamp", "timer_del_uniq_key"),
}

PARTITION_COLUMNS = ("date", "hour", "segment")
TMP_DIR = "_tmp"
MANIFEST_DIR = "_segments"
RECONCILIATION_DIR = "reconciliation"


def ddl(table: str) -> str:
    """The table's columns as a Spark DDL string (``"commit_log_offset bigint, ..."``).

    Raises:
        KeyError: not one of ``ARCHIVE_TABLES``.
    """
    return ", ".join(f"{name} {kind}" for name, kind in ARCHIVE_TABLES[table])


def archive_root(uri: str) -> str:
    """``uri`` without a trailing slash; a bare path stays a path (Spark reads it as file:)."""
    return uri.rstrip("/") or "/"


def table_path(uri: str, table: str) -> str:
    """``{uri}/{table}``: the base path Spark reads a table from (partition discovery)."""
    return f"{archive_root(uri)}/{table}"


def segment_partition(start_ms: int) -> str:
    """``date=YYYY-MM-DD/hour=HH/segment={start_ms}`` of the segment starting at ``start_ms``
    (UTC)."""
    at = datetime.fromtimestamp(start_ms / 1000, tz=UTC)
    return f"date={at:%Y-%m-%d}/hour={at:%H}/segment={start_ms}"


def segment_path(uri: str, table: str, start_ms: int) -> str:
    """Where the complete segment starting at ``start_ms`` of ``table`` lies."""
    return f"{table_path(uri, table)}/{segment_partition(start_ms)}"


def segment_tmp_path(uri: str, table: str, start_ms: int, token: str) -> str:
    """Where a segment is written before it is renamed into place (``token``: one attempt's
    random name, so two attempts never share a directory)."""
    return f"{archive_root(uri)}/{TMP_DIR}/{table}/segment={start_ms}-{token}"


def manifest_dir(uri: str) -> str:
    """``{uri}/_segments``: where the segments' manifests lie (``broker.rules.archive_manifest``)."""
    return f"{archive_root(uri)}/{MANIFEST_DIR}"


def manifest_path(uri: str, start_ms: int) -> str:
    """``{uri}/_segments/{start_ms}.json``: the manifest of the segment starting at
    ``start_ms``, written once its every table is in place."""
    return f"{manifest_dir(uri)}/{start_ms}.json"


def manifest_tmp_path(uri: str, start_ms: int, token: str) -> str:
    """Where a manifest is written before it is renamed into place."""
    return f"{archive_root(uri)}/{TMP_DIR}/{MANIFEST_DIR}/{start_ms}-{token}.json"


def run_output_path(uri: str, run_id: int | str, part: str) -> str:
    """``{uri}/reconciliation/run={run_id}/{part}``: a reconciliation run's Parquet output
    (``part``: facts, anomalies, buckets, analytics)."""
    return f"{archive_root(uri)}/{RECONCILIATION_DIR}/run={run_id}/{part}"

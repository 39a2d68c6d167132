"""The archive tables (``broker.pipeline.schema.ARCHIVE_TABLES``) as Arrow schemas, for code that
builds archive rows without Spark's Python workers: ``spark.createDataFrame(pyarrow.Table)``
(the tests' ``archive_builder``) or Parquet written straight from Arrow (``bench/reconcile.py``).
"""

from __future__ import annotations

import pyarrow as pa

from broker.pipeline.schema import ARCHIVE_TABLES

# The Spark SQL types the archive uses, as Arrow types (Parquet: INT64, INT32, BYTE_ARRAY UTF8,
# LIST<INT64>), so Spark reads back exactly ``schema.ddl(table)``.
_ARROW_TYPES: dict[str, pa.DataType] = {
    "bigint": pa.int64(),
    "int": pa.int32(),
    "string": pa.string(),
    "array<bigint>": pa.list_(pa.int64()),
}


def arrow_schema(table: str) -> pa.Schema:
    """``table``'s columns as an Arrow schema, in file order.

    Raises:
        KeyError: not an archive table, or a column type without an Arrow mapping.
    """
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in ARCHIVE_TABLES[table]])


def arrow_table(table: str, rows: list[tuple]) -> pa.Table:
    """Rows of ``table`` (tuples in ``ARCHIVE_TABLES`` column order) as an Arrow table."""
    schema = arrow_schema(table)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.table(
        [pa.array(list(values), type=f.type) for values, f in zip(columns, schema, strict=True)],
        schema=schema,
    )

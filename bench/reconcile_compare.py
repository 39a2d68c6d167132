"""Two reconciliation outputs compared (``facts/``, ``anomalies/``, ``buckets/``,
``analytics/``): the Spark job's and the DuckDB same-work baseline's (``reconcile_same_work``),
or the job's before and after a change. Read with DuckDB.

- Schemas: each part's column names, order and types (nested ones with their fields) equal.
- Rows: the same multiset, in any order. Lists the job fills in no set order
  (``collect_list``: ``deliveries``, ``check_events``, ``refused_ends``, ``op_doubles``, and
  ``op_entries`` in evidence) are sorted first; ``check_histogram`` is a map (compared as its
  sorted entries); ``evidence`` is compared as JSON values with null members dropped (Spark's
  ``to_json`` leaves them out); ``discard_rate`` within 1e-12.
- Percentiles: ``percentile_approx``'s stated error: the value at a rank within
  floor(n / PERCENTILE_ACCURACY) of the nearest rank ceil(q * n), among the resolution
  latencies of the row's judged transactions (from the second output's ``facts/``, once the
  facts compare equal); exact below that accuracy.

    from reconcile_compare import compare
    differences = compare("out-spark", "out-duckdb")   # [] when they agree
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from broker.rules.anomalies import HOUR_MS

PARTS = ("facts", "anomalies", "buckets", "analytics")
UNORDERED_FACT_LISTS = ("deliveries", "check_events", "refused_ends", "op_doubles")
UNORDERED_EVIDENCE_LISTS = ("op_entries",)
PERCENTILE_ACCURACY = 10_000  # broker.pipeline.analytics.PERCENTILE_ACCURACY
PERCENTILE_COLUMNS = {
    "resolution_p50_ms": 0.5,
    "resolution_p95_ms": 0.95,
    "resolution_p99_ms": 0.99,
}
FLOAT_TOLERANCE = 1e-12
SHOWN = 5  # differing rows printed per side and part


def _files(out: Path, part: str) -> str:
    return f"read_parquet('{out / part}/*.parquet')"


def _schema(con, out: Path, part: str) -> list[tuple[str, str]]:
    return [
        (r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM {_files(out, part)}").fetchall()
    ]


def _json_value(value: object) -> object:
    """A JSON value with null members dropped and the unordered lists sorted."""
    if isinstance(value, dict):
        clean = {k: _json_value(v) for k, v in value.items() if v is not None}
        for key in UNORDERED_EVIDENCE_LISTS:
            if isinstance(clean.get(key), list):
                clean[key] = sorted(clean[key], key=lambda v: json.dumps(v, sort_keys=True))
        return clean
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _hashable(value: object) -> object:
    """Lists and dicts of a fetched row as tuples (so rows can be counted)."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _anomaly_rows(con, out: Path) -> Counter:
    rows = con.execute(f"SELECT * FROM {_files(out, 'anomalies')}").fetchall()
    return Counter(
        (*row[:-1], json.dumps(_json_value(json.loads(row[-1])), sort_keys=True)) for row in rows
    )


def _multiset_differences(
    part: str, names: tuple[str, str], left: Counter, right: Counter
) -> list[str]:
    out = []
    for name, mine, other in ((names[0], left, right), (names[1], right, left)):
        only = mine - other
        if only:
            shown = "; ".join(repr(row) for row in list(only.elements())[:SHOWN])
            out.append(f"{part}: {sum(only.values())} rows only in {name}: {shown}")
    return out


def _facts_differences(con, outs: tuple[Path, Path], names: tuple[str, str]) -> list[str]:
    """The facts' rows as multisets of row hashes (64-bit: a collision among a million rows has
    odds of about 1e-8), then the rows behind the hashes found on one side only."""
    columns = [name for name, _ in _schema(con, outs[0], "facts")]
    select = ", ".join(
        f"list_sort({c}) AS {c}" if c in UNORDERED_FACT_LISTS else c for c in columns
    )
    row_hash = f"hash({', '.join(columns)})"
    for i, out in enumerate(outs):
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE facts_{i} AS SELECT {row_hash} AS row_hash, * "
            f"FROM (SELECT {select} FROM {_files(out, 'facts')})"
        )
    found = []
    for i, name in enumerate(names):
        only = f"SELECT row_hash FROM facts_{i} EXCEPT ALL SELECT row_hash FROM facts_{1 - i}"
        count = con.execute(f"SELECT count(*) FROM ({only})").fetchone()[0]
        if count:
            rows = con.execute(
                f"SELECT * EXCLUDE (row_hash) FROM facts_{i} WHERE row_hash IN ({only}) "
                f"LIMIT {SHOWN}"
            ).fetchall()
            found.append(f"facts: {count} rows only in {name}: " + "; ".join(map(repr, rows)))
    return found


def _percentile_bands(con, facts: Path) -> dict[tuple, dict[str, tuple]]:
    """Per (producer_group, topic, hour_ms): per percentile column, the lowest and highest
    value ``percentile_approx`` may return."""
    bands = []
    for column, q in PERCENTILE_COLUMNS.items():
        rank = f"ceil({q}::DOUBLE * len(l))::BIGINT"
        slack = f"(len(l) // {PERCENTILE_ACCURACY})::BIGINT"
        bands.append(
            f"'{column}', [l[greatest(1, {rank} - {slack})], l[least(len(l), {rank} + {slack})]]"
        )
    rows = con.execute(
        f"""SELECT producer_group, topic, hour_ms, map_from_entries([{", ".join(f"({b})" for b in bands)}])
        FROM (SELECT coalesce(producer_group, '') AS producer_group, coalesce(topic, '') AS topic,
                     half_timestamp - half_timestamp % {HOUR_MS} AS hour_ms,
                     list_sort(list(resolution_latency_ms)) AS l
              FROM {_files(facts, "facts")} WHERE judged AND resolution_latency_ms IS NOT NULL
              GROUP BY ALL)"""
    ).fetchall()
    return {(pg, topic, hour): dict(band) for pg, topic, hour, band in rows}


def _analytics_differences(con, outs: tuple[Path, Path], names: tuple[str, str]) -> list[str]:
    bands = _percentile_bands(con, outs[1])
    keyed = []
    for out in outs:
        cur = con.execute(
            f"SELECT * REPLACE (list_sort(map_entries(check_histogram)) AS check_histogram) "
            f"FROM {_files(out, 'analytics')}"
        )
        columns = [d[0] for d in cur.description]
        keyed.append(
            {(r[0], r[1], r[2]): dict(zip(columns, r, strict=True)) for r in cur.fetchall()}
        )
    found = []
    for key in sorted(set(keyed[0]) | set(keyed[1])):
        rows = [k.get(key) for k in keyed]
        if None in rows:
            found.append(f"analytics: {key} only in {names[rows.index(None) ^ 1]}")
            continue
        for column, a in rows[0].items():
            b = rows[1][column]
            if column in PERCENTILE_COLUMNS and a is not None and b is not None:
                low, high = bands.get(key, {}).get(column, (b, b))
                if not (low <= a <= high and low <= b <= high):
                    found.append(
                        f"analytics {key}: {column} {names[0]} {a}, {names[1]} {b}, "
                        f"allowed [{low}, {high}]"
                    )
            elif isinstance(a, float) and isinstance(b, float):
                if abs(a - b) > FLOAT_TOLERANCE:
                    found.append(f"analytics {key}: {column} {names[0]} {a}, {names[1]} {b}")
            elif a != b:
                found.append(f"analytics {key}: {column} {names[0]} {a!r}, {names[1]} {b!r}")
    return found


def compare(
    left: str | Path, right: str | Path, *, names: tuple[str, str] = ("spark", "duckdb")
) -> list[str]:
    """The differences between two reconciliation outputs (directories holding ``PARTS``), one
    line each; [] when they agree (the module's docstring says how they are compared)."""
    import duckdb

    outs = (Path(left), Path(right))
    con = duckdb.connect()
    try:
        found = []
        for part in PARTS:
            schemas = [_schema(con, out, part) for out in outs]
            if schemas[0] != schemas[1]:
                found.append(f"{part}: schema {names[0]} {schemas[0]} != {names[1]} {schemas[1]}")
        if found:
            return found
        found += _facts_differences(con, outs, names)
        found += _multiset_differences(
            "anomalies", names, _anomaly_rows(con, outs[0]), _anomaly_rows(con, outs[1])
        )
        buckets = [
            Counter(map(_hashable, con.execute(f"SELECT * FROM {_files(o, 'buckets')}").fetchall()))
            for o in outs
        ]
        found += _multiset_differences("buckets", names, *buckets)
        if not found:  # the percentiles' bands come from facts known equal
            found += _analytics_differences(con, outs, names)
        return found
    finally:
        con.close()

"""Incident export: everything about a selection or a filter of transactions in one zip of JSON
and CSV, for the people reading about last night's incident (``docs/console.md`` "Incident
export").

More: docs/design.md, "Module notes", broker/services/operations/incident_export.py."""

from __future__ import annotations

import csv
import io
import json
import logging
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from broker.models import Transaction
from broker.rules.audit import iso_utc
from broker.rules.clock import now_ms
from broker.selectors.incident import Incident, IncidentScope, incident_read

logger = logging.getLogger("halfmoon.export")

EXPORT_FILES = ("transactions", "timeline", "audit", "anomalies")
SPOOL_BYTES = 8 * 1024 * 1024  # an export up to 8 MB is built in memory, a bigger one on disk

README = """Halfmoon incident export
========================

filter.json          what made this export (a selection of transactions, or the filter of the
                     stuck list, the message search or the audit log), who made it and when
transactions.*       every transaction of the export, all its columns
timeline.*           each transaction's timeline, oldest first: half message stored, checks
                     and their answers, discards, resumes, the end, deliveries per consumer
                     group (kind, title, actor, channel, detail)
audit.*              the operators' audit entries (console and API) that acted on any of the
                     transactions, one row per entry and transaction
anomalies.*          the latest successful reconciliation run's anomalies about them (empty
                     when none, or before the first run)

Each comes as .json (an array of objects) and .csv (the same rows; nested values as JSON).
Times are ms since the epoch (*_timestamp) with their ISO 8601 UTC form beside them (*_at).
"""


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: the number of rows of each file (``EXPORT_FILES``) and the zip's
    size (bytes)."""

    rows: dict[str, int]
    size: int


def _at(value: int | None) -> str:
    return iso_utc(value) if value else ""


def _with_times(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each ``timestamp`` / ``<x>_timestamp`` (ms) followed by its ISO 8601 UTC
    ``at`` / ``<x>_at``."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        out[name] = value
        if name == "timestamp" or name.endswith("_timestamp"):
            out[name.removesuffix("timestamp") + "at"] = (
                _at(value) if isinstance(value, int) else ""
            )
    return out


def _transaction_row(tx: Transaction) -> dict[str, Any]:
    return _with_times(
        {f.attname: getattr(tx, f.attname) for f in Transaction._meta.concrete_fields}
    )


def _rows(incident: Incident) -> dict[str, list[dict[str, Any]]]:
    timeline = [
        _with_times(
            {
                "transaction_id": tid,
                "timestamp": e.timestamp,
                "kind": e.kind,
                "title": e.title,
                "actor": e.actor,
                "channel": e.channel,
                "detail": e.detail,
            }
        )
        for tid, entries in incident.timelines.items()
        for e in entries
    ]
    audit = [
        _with_times(
            {
                "entry_id": entry.pk,
                "timestamp": entry.timestamp,
                "actor": entry.actor,
                "via": entry.via,
                "action": entry.action,
                "state": entry.state,
                "reason": entry.reason,
                "result": entry.result,
                "transaction_id": target.transaction_id,
                "target_result": target.result,
                "target_detail": target.detail,
            }
        )
        for entry, targets in incident.audit
        for target in targets
    ]
    run = incident.run
    anomalies = [
        {
            "run_id": a.run_id,
            "run_until_timestamp": run.until_timestamp if run else None,
            "kind": a.kind,
            "transaction_id": a.transaction_id,
            "msg_id": a.msg_id,
            "producer_group": a.producer_group,
            "topic": a.topic,
            "evidence": a.evidence,
        }
        for a in incident.anomalies
    ]
    return {
        "transactions": [_transaction_row(tx) for tx in incident.transactions],
        "timeline": timeline,
        "audit": audit,
        "anomalies": [_with_times(a) for a in anomalies],
    }


def _csv(rows: Iterable[dict[str, Any]], columns: list[str]) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
                for k, v in row.items()
            }
        )
    return text.getvalue()


_COLUMNS = {
    "timeline": ["transaction_id", "timestamp", "at", "kind", "title", "actor", "channel", "detail"],
    "audit": [
        "entry_id", "timestamp", "at", "actor", "via", "action", "state", "reason", "result",
        "transaction_id", "target_result", "target_detail",
    ],
    "anomalies": [
        "run_id", "run_until_timestamp", "run_until_at", "kind", "transaction_id", "msg_id",
        "producer_group", "topic", "evidence",
    ],
}  # fmt: skip


def incident_export_write(*, scope: IncidentScope, actor: str, out: IO[bytes]) -> ExportSummary:
    """Write the export of ``scope`` (see the module docstring) as a zip into ``out``, made by
    ``actor`` (``console:<username>``, ``operator:<key name>``); logged (``halfmoon.export``:
    who took which data).

    Returns:
        the rows per file and the zip's size (bytes).

    Raises:
        InvalidInput: ``export_empty``, ``export_too_large`` (``broker.selectors.incident``).
    """
    incident = incident_read(scope)
    rows = _rows(incident)
    columns = {
        "transactions": list(rows["transactions"][0]) if rows["transactions"] else [],
        **_COLUMNS,
    }
    made = now_ms()
    meta = {
        "scope": scope.as_json(),
        "made_by": actor,
        "made_timestamp": made,
        "made_at": _at(made),
        "reconciliation_run": (
            {
                "id": incident.run.pk,
                "since_timestamp": incident.run.since_timestamp,
                "until_timestamp": incident.run.until_timestamp,
            }
            if incident.run
            else None
        ),
        "rows": {name: len(rows[name]) for name in EXPORT_FILES},
    }
    start = out.tell()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.txt", README)
        zf.writestr("filter.json", json.dumps(meta, indent=2, sort_keys=True))
        for name in EXPORT_FILES:
            zf.writestr(f"{name}.json", json.dumps(rows[name], indent=1, default=str))
            zf.writestr(f"{name}.csv", _csv(rows[name], columns[name]))
    size = out.tell() - start
    logger.info(
        "%s exported %d transactions (%s): %d bytes",
        actor,
        len(incident.transactions),
        scope.kind,
        size,
    )
    return ExportSummary(rows=meta["rows"], size=size)


def incident_export_file(*, scope: IncidentScope, actor: str) -> tuple[IO[bytes], ExportSummary]:
    """``incident_export_write`` into a spooled temporary file (in memory up to
    ``SPOOL_BYTES``, then on disk), rewound, for a response to stream; the caller (or the
    response) closes it.

    Raises:
        InvalidInput: as ``incident_export_write`` (the file is closed).
    """
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned open
    try:
        summary = incident_export_write(scope=scope, actor=actor, out=out)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out, summary


def incident_export_filename(scope: IncidentScope, made: int) -> str:
    """``halfmoon-incident-<kind>-<YYYYMMDDTHHMMSS>Z.zip`` for an export made at ``made``
    (ms)."""
    stamp = iso_utc(made).replace(":", "").replace("-", "")[:15]
    return f"halfmoon-incident-{scope.kind}-{stamp}Z.zip"

"""Rebuilding the derived transaction state from the commit log (RocketMQ 3.1's
``TransactionStateService.recreateStateTable`` rebuilds the transaction state table from its
redo log after an abnormal shutdown).

Halfmoon keeps one ``Transaction`` row per transaction so that a scan finds due checks with an
index read. Every fact in that row follows from append-only records, and ``transactions_rebuild``
recomputes it from them, reports each difference and (unless ``dry_run``) rewrites the rows.

More: docs/design.md, "Module notes", broker/services/recovery/__init__.py."""

from broker.rules.recovery_report import (
    COMPARED_FIELDS,
    DELIVERED_MESSAGE,
    EXTRA,
    MISSING,
    RESOLUTION,
    RESOLUTION_ACTION,
    RESOLUTION_HALF_OFFSET,
    RESOLUTION_OP_OFFSET,
    Difference,
    RebuildReport,
)
from broker.services.recovery.rebuild import CHUNK_SIZE, transactions_rebuild

__all__ = [
    "CHUNK_SIZE",
    "COMPARED_FIELDS",
    "DELIVERED_MESSAGE",
    "EXTRA",
    "MISSING",
    "RESOLUTION",
    "RESOLUTION_ACTION",
    "RESOLUTION_HALF_OFFSET",
    "RESOLUTION_OP_OFFSET",
    "Difference",
    "RebuildReport",
    "transactions_rebuild",
]

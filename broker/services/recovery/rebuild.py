"""``transactions_rebuild``: the whole rebuild, half queue by half queue, chunk by chunk, then
the rows with no half message at all. See the package docstring for what is authoritative."""

from __future__ import annotations

import logging
import time

from django.db import transaction

from broker.conf import conf
from broker.rules.recovery import HalfMessage
from broker.rules.recovery_report import EXTRA, Difference, RebuildReport
from broker.services.recovery.chunk import chunk_logs_read
from broker.services.recovery.compare import transaction_compare
from broker.services.recovery.oplog import OpIndex, op_index_read
from broker.services.recovery.reads import (
    extra_rows_read,
    half_queues_read,
    halves_read,
    snapshot_begin,
    store_timestamps_read,
)
from broker.services.recovery.repair import RepairPlan, extra_row_delete

logger = logging.getLogger("halfmoon.recovery")

CHUNK_SIZE = 2000  # half messages per step: 7 queries, ~2 MB of rows (100k: ~50 steps)


def transactions_rebuild(*, dry_run: bool = False, chunk_size: int = CHUNK_SIZE) -> RebuildReport:
    """Rebuild every ``Transaction`` row (and the ``Resolution`` journal where the commit log
    says more) from the commit log and journals; return the report.

    With ``dry_run`` nothing is written and everything is read from one snapshot (REPEATABLE
    READ, READ ONLY on PostgreSQL). Otherwise each chunk of ``chunk_size`` half messages is
    compared and repaired in its own database transaction, its rows locked first.
    """
    started = time.monotonic()
    report = RebuildReport(dry_run=dry_run)
    if dry_run:
        with transaction.atomic():
            snapshot_begin()
            _rebuild(report, apply=False, chunk_size=chunk_size)
    else:
        _rebuild(report, apply=True, chunk_size=chunk_size)
        report.applied = True
    report.elapsed_ms = int((time.monotonic() - started) * 1000)
    _report_log(report)
    return report


def _report_log(report: RebuildReport) -> None:
    if report.differences:
        logger.warning(
            "rebuild found %d differences (%d not repairable)%s",
            len(report.differences),
            len(report.unrepairable),
            "" if report.dry_run else f", repaired {report.repaired}",
        )
    logger.info(
        "rebuild read %d half and %d Op messages, %d transactions, in %d ms",
        report.half_messages,
        report.op_messages,
        report.transactions,
        report.elapsed_ms,
    )


def _rebuild(report: RebuildReport, *, apply: bool, chunk_size: int) -> None:
    for half_queue_id, next_offset in half_queues_read():
        ops = op_index_read(half_queue_id, next_offset)
        report.op_messages += ops.messages
        from_offset = 0
        while True:
            halves = halves_read(half_queue_id, from_offset, chunk_size)
            if not halves:
                break
            report.half_messages += len(halves)
            from_offset = halves[-1].queue_offset + 1
            _chunk_rebuild(half_queue_id, halves, ops, report, apply=apply)
            if len(halves) < chunk_size:
                break
    _extra_rows(report, apply=apply)


def _chunk_rebuild(
    half_queue_id: int,
    halves: list[HalfMessage],
    ops: OpIndex,
    report: RebuildReport,
    *,
    apply: bool,
) -> None:
    """Read, compare and (with ``apply``) repair one chunk, in one database transaction."""
    timeout_ms, interval_ms = conf.transaction_timeout_ms, conf.transaction_check_interval_ms
    with transaction.atomic():
        chunk = chunk_logs_read(half_queue_id, halves, ops, lock=apply)
        if not chunk.logs:
            return
        report.transactions += len(chunk.logs)
        plan = RepairPlan()
        for logs in chunk.logs:
            transaction_compare(
                logs,
                chunk.rows.get(logs.half.msg_id),
                plan,
                transaction_timeout_ms=timeout_ms,
                check_interval_ms=interval_ms,
            )
        if plan.op_timestamps_wanted:
            plan.op_timestamps = store_timestamps_read(plan.op_timestamps_wanted)
        report.differences.extend(plan.differences)
        if apply and plan.differences:
            report.repaired += plan.apply()


def _extra_rows(report: RebuildReport, *, apply: bool) -> None:
    """Rows for transactions with no half message at all: deleted (with their queued check
    requests) unless a ``Resolution`` refers to them, which is left to an operator."""
    for tid, state, journalled in extra_rows_read(CHUNK_SIZE):
        report.differences.append(Difference(tid, EXTRA, state, None, not journalled))
        if apply and not journalled:
            report.repaired += 1 if extra_row_delete(tid) else 0

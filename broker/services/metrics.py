"""The ``/metrics`` rollup: the append-only journals (``Resolution``, ``TransactionEvent``)
folded into ``MetricRollup`` rows so that a scrape costs what changed since the last one, not
the history. Nothing is added to the write paths: a scrape folds (``metrics_fold``), then reads
(``broker.selectors.metrics``).

More: docs/design.md, "Module notes", broker/services/metrics.py."""

from __future__ import annotations

from django.db import OperationalError, connection, transaction
from django.db.models import Model

from broker.models import MetricRollup, MetricWatermark, Resolution, TransactionEvent
from broker.selectors.metrics import AGGREGATES, EVENTS, RESOLUTIONS, Totals, watermark

HORIZON_LOCK_TIMEOUT_MS = 200
"""Longest a scrape waits for a journal's writers before it skips that journal's fold (ms)."""

JOURNALS: dict[str, type[Model]] = {RESOLUTIONS: Resolution, EVENTS: TransactionEvent}
"""Per rollup source, the journal it folds."""


def metrics_fold() -> None:
    """Fold every journal's new rows into the rollup (see the module docstring). Safe to run
    from any number of processes at once: folds of one journal take turns on its watermark
    row."""
    for source, journal in sorted(JOURNALS.items()):
        horizon = _horizon(journal)
        if horizon is not None:
            _fold(source, horizon)


def metrics_rollup_reset() -> None:
    """Forget the rollup: delete its rows and put every watermark back to 0, so the next
    ``metrics_fold`` recounts the journals from the start. Call after rows already folded
    were rewritten (a repairing ``rebuild_transactions``)."""
    with transaction.atomic():
        for source in sorted(JOURNALS):
            _watermark_locked(source)
        MetricRollup.objects.all().delete()
        MetricWatermark.objects.update(last_id=0)


def _horizon(journal: type[Model]) -> int | None:
    """An id of ``journal`` under which every row that will ever commit is visible now (0 for
    an empty journal); None if its writers held it longer than ``HORIZON_LOCK_TIMEOUT_MS``."""
    table = connection.ops.quote_name(journal._meta.db_table)
    max_id = f"SELECT MAX(id) FROM {table}"
    with connection.cursor() as cursor:
        try:
            # A savepoint when the caller has a transaction open: a timeout undoes only this.
            with transaction.atomic():
                cursor.execute("SELECT current_setting('lock_timeout')")
                previous = cursor.fetchone()[0]
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true)", [f"{HORIZON_LOCK_TIMEOUT_MS}ms"]
                )
                cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
                cursor.execute(max_id)
                return cursor.fetchone()[0] or 0
        except OperationalError:  # lock_timeout: LockNotAvailable
            return None


def _watermark_locked(source: str) -> MetricWatermark:
    """The watermark row of ``source``, created at 0 if missing, locked until the caller's
    transaction ends."""
    found = MetricWatermark.objects.select_for_update().filter(source=source).first()
    if found is None:
        MetricWatermark.objects.bulk_create([MetricWatermark(source=source)], ignore_conflicts=True)
        found = MetricWatermark.objects.select_for_update().get(source=source)
    return found


def _fold(source: str, horizon: int) -> None:
    """Add the rows of ``source`` with id in ``(watermark, horizon]`` to the rollup and move
    the watermark to ``horizon``, in one database transaction."""
    if horizon <= watermark(source):
        return  # nothing new: no lock, no write (a reset in between is folded next time)
    with transaction.atomic():
        mark = _watermark_locked(source)
        if horizon <= mark.last_id:
            return
        new = AGGREGATES[source](after_id=mark.last_id, up_to_id=horizon)
        rows = {
            (row.kind, row.label, row.producer_group): row
            for row in MetricRollup.objects.filter(source=source)
        }
        changed, created = [], []
        for (kind, label, group), totals in new.items():
            row = rows.get((kind, label, group))
            if row is None:
                row = MetricRollup(
                    source_id=source, kind=kind, label=label, producer_group=group, buckets=[]
                )
                created.append(row)
            else:
                changed.append(row)
            total = Totals(row.count, row.sum_ms, list(row.buckets), row.last_timestamp)
            total.add(totals)
            row.count, row.sum_ms, row.buckets = total.count, total.sum_ms, total.buckets
            row.last_timestamp = total.last_timestamp
        MetricRollup.objects.bulk_create(created)
        MetricRollup.objects.bulk_update(changed, ["count", "sum_ms", "buckets", "last_timestamp"])
        mark.last_id = horizon
        mark.save(update_fields=["last_id"])

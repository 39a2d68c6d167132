"""Console tasks: thin wrappers over ``broker.services.bulk``."""

from __future__ import annotations

from celery import shared_task

from broker.services.bulk import bulk_run


@shared_task(
    name="tasks.console.bulk_action_run",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def bulk_action_run(bulk_id: int) -> None:
    """Apply a confirmed bulk action to its frozen, still pending targets (queued by
    ``bulk_apply``; redelivered if the worker dies, and a rerun skips the done targets)."""
    bulk_run(bulk_id)

"""Console tasks: thin wrappers over ``broker.services.bulk`` and
``broker.services.consumer_group_ops``."""

from __future__ import annotations

from celery import shared_task

from broker.services.bulk import bulk_run
from broker.services.consumer_group_ops import dead_letters_run


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


@shared_task(
    name="tasks.console.dead_letter_resend_run",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def dead_letter_resend_run(resend_id: int) -> None:
    """Resend a confirmed dead-letter set's frozen, still pending dead letters to their
    consumer group (queued by ``dead_letters_apply``; a rerun skips the done ones)."""
    dead_letters_run(resend_id)

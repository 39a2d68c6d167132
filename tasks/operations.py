"""Operations tasks (bulk actions, dead-letter resends), started by the console and the API alike:
thin wrappers over ``broker.services.operations.bulk`` and
``broker.services.consumption.dead_letters``."""

from __future__ import annotations

from celery import shared_task

from broker.services.consumption.dead_letters import dead_letters_run
from broker.services.operations.bulk import bulk_run


@shared_task(
    name="tasks.operations.bulk_action_run",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def bulk_action_run(bulk_id: int) -> None:
    """Apply a confirmed bulk action to its frozen, still pending targets (queued by
    ``bulk_apply``; redelivered if the worker dies, and a rerun skips the done targets)."""
    bulk_run(bulk_id)


@shared_task(
    name="tasks.operations.dead_letter_resend_run",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def dead_letter_resend_run(resend_id: int) -> None:
    """Resend a confirmed dead-letter set's frozen, still pending dead letters to their
    consumer group (queued by ``dead_letters_apply``; a rerun skips the done ones)."""
    dead_letters_run(resend_id)

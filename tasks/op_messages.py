"""Op message flush tasks: thin wrappers over ``broker.services.transactions.op_messages``."""

from __future__ import annotations

from celery import shared_task

from broker.services.transactions.op_messages import op_flush, op_flush_all


@shared_task(name="tasks.op_messages.op_flush_all", ignore_result=True)
def op_flush_all_task() -> int:
    """Beat entry, every HALFMOON_OP_BATCH_INTERVAL_MS (transactionOpBatchInterval)."""
    return op_flush_all()


@shared_task(name="tasks.op_messages.op_flush_queue", ignore_result=True)
def op_flush_queue(half_queue_id: int) -> int:
    """Queued when a process buffered HALFMOON_OP_MSG_MAX_SIZE bytes for one half queue."""
    return op_flush(half_queue_id=half_queue_id)

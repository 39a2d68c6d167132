"""The scan checkpoints of a half queue and its Op queue, kept as consumer offsets of the
internal group ``CID_RMQ_SYS_TRANS`` (RocketMQ ``TransactionalMessageServiceImpl.check``:
``updateConsumeOffset`` of the half queue, ``calculateOpOffset`` of the Op queue)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Min

from broker.constants import CHECK_GROUP, HALF_TOPIC, OP_HALF_TOPIC
from broker.models import (
    ConsumeQueue,
    ConsumerOffset,
    Message,
    Resolution,
    Transaction,
)
from broker.rules.op_body import op_body_parse
from broker.rules.states import TransactionState

logger = logging.getLogger("halfmoon.checks")

OP_READ_BATCH = 32  # Op messages read at a time (RocketMQ pulls 32)
OP_READ_MAX_BATCHES = 100  # per call: the checkpoint catches up over later runs


def checkpoint_advance(*, half_queue_id: int) -> tuple[int, int]:
    """Advance the scan checkpoints of one half queue and its Op queue.

    The half checkpoint moves to the first half queue offset that is not done: still PREPARED,
    or resolved but not yet named by an Op message (every offset below it is resolved and in
    the Op log, or discarded, or superseded by a resume). The Op checkpoint
    (``calculateOpOffset``) moves only over the contiguous prefix of Op messages whose half
    offsets all lie below the half checkpoint, read ``OP_READ_BATCH`` at a time; it stops
    before an Op message whose body has a part that is not an offset (logged; strict, as the
    scan must not pass what it cannot read). Both only move forward. Cost: two index reads plus
    the Op messages passed over, whatever the history.

    Returns (half checkpoint, Op checkpoint): queue offsets.
    """
    with transaction.atomic():
        half_ckpt, op_ckpt = _checkpoints_locked(half_queue_id)
        bounds = [
            ConsumeQueue.objects.filter(topic=HALF_TOPIC, queue_id=half_queue_id)
            .values_list("max_offset", flat=True)
            .first()
            or 0,
            Transaction.objects.filter(
                half_queue_id=half_queue_id, state=TransactionState.PREPARED
            ).aggregate(m=Min("half_queue_offset"))["m"],
            Resolution.objects.filter(
                half_queue_id=half_queue_id, op_commit_log_offset__isnull=True
            ).aggregate(m=Min("half_queue_offset"))["m"],
        ]
        new_half = max(half_ckpt.offset, min(b for b in bounds if b is not None))
        new_op = _op_offset_calculate(half_queue_id, start=op_ckpt.offset, half_offset=new_half)
        for ckpt, offset in ((half_ckpt, new_half), (op_ckpt, new_op)):
            if offset != ckpt.offset:
                ckpt.offset = offset
                ckpt.save(update_fields=["offset"])
    return new_half, new_op


def _checkpoints_locked(half_queue_id: int) -> tuple[ConsumerOffset, ConsumerOffset]:
    """The (half, Op) checkpoint rows of the queue, created at 0 if missing, locked."""
    ConsumerOffset.objects.bulk_create(
        [
            ConsumerOffset(consumer_group=CHECK_GROUP, topic=topic, queue_id=half_queue_id)
            for topic in (HALF_TOPIC, OP_HALF_TOPIC)
        ],
        ignore_conflicts=True,
    )
    offsets = {
        o.topic: o
        for o in ConsumerOffset.objects.select_for_update().filter(
            consumer_group=CHECK_GROUP,
            topic__in=[HALF_TOPIC, OP_HALF_TOPIC],
            queue_id=half_queue_id,
        )
    }
    return offsets[HALF_TOPIC], offsets[OP_HALF_TOPIC]


def _op_offset_calculate(half_queue_id: int, *, start: int, half_offset: int) -> int:
    """RocketMQ ``calculateOpOffset``: the Op queue offset after the contiguous run of Op
    messages from ``start`` that name only half offsets below ``half_offset``."""
    new_op = start
    for _ in range(OP_READ_MAX_BATCHES):
        batch = list(
            Message.objects.filter(
                topic=OP_HALF_TOPIC, queue_id=half_queue_id, queue_offset__gte=new_op
            )
            .order_by("queue_offset")
            .values_list("queue_offset", "body")[:OP_READ_BATCH]
        )
        for queue_offset, body in batch:
            parsed = op_body_parse(body)
            if parsed.invalid:
                logger.warning(
                    "Op message %d of queue %d has invalid parts %r: the checkpoint stops there",
                    queue_offset,
                    half_queue_id,
                    parsed.invalid,
                )
                return new_op
            if parsed.offsets and max(parsed.offsets) >= half_offset:
                return new_op
            new_op = queue_offset + 1
        if len(batch) < OP_READ_BATCH:
            break
    return new_op

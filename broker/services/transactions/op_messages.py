"""Batched Op messages (RocketMQ RIP-50; TransactionalMessageServiceImpl
batchSendOpMessage / deletePrepareMessage).

RocketMQ buffers Op entries in memory and loses them in a crash, then re-checks and may
deliver twice. Here a resolution is first made durable as a ``Resolution`` journal row, in the
same database transaction as the state change and the delivered message, so the producer is
answered only once nothing can lose it. ``op_flush`` then writes the journal's unflushed rows of
a half queue as Op messages, each naming many half queue offsets (``12,13,14,``) and at most
``HALFMOON_OP_MSG_MAX_SIZE`` bytes, and marks the rows flushed in the same database
transaction: a crash mid-flush leaves them unflushed, and the next flush writes them once.

Flushers run from beat every ``HALFMOON_OP_BATCH_INTERVAL_MS``, at the end of every scan of a
half queue, and as soon as a process has buffered ``HALFMOON_OP_MSG_MAX_SIZE`` bytes of offsets
for one queue (``op_buffer_notes``); each writes only full Op messages, or everything once the
oldest unflushed resolution is an interval old. An end request never waits for a flush.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery import current_app
from django.db import transaction

from broker.conf import conf
from broker.constants import OP_HALF_TOPIC, OP_REMOVE_TAG
from broker.models import Resolution
from broker.plumbing.size_trigger import SizeTrigger
from broker.rules.clock import now_ms
from broker.rules.op_body import op_body_format, op_body_size
from broker.services.commitlog.storage import message_put, new_msg_id

logger = logging.getLogger("halfmoon.op_messages")

OP_FLUSH_LIMIT = 20_000  # resolutions per flush transaction: ~8 bytes each, ~40 Op messages
OP_FLUSH_TASK = "tasks.op_messages.op_flush_queue"

_buffered = SizeTrigger()
"""This process's bytes of Op offsets noted per half queue since its last size-triggered flush."""


def op_buffer_note(*, half_queue_id: int, half_queue_offset: int) -> None:
    """Count a journalled resolution towards its queue's size trigger (``op_buffer_notes`` of
    one resolution)."""
    op_buffer_notes([(half_queue_id, half_queue_offset)])


def op_buffer_notes(resolutions: Sequence[tuple[int, int]]) -> None:
    """Count journalled resolutions, ``(half_queue_id, half_queue_offset)`` each, towards their
    queues' size trigger, after the current database transaction commits (one callback however
    many they are). When this process has noted ``HALFMOON_OP_MSG_MAX_SIZE`` bytes for a queue,
    a flush of that queue is queued (a Celery task; nobody waits for it)."""
    if not resolutions:
        return
    sizes: dict[int, int] = {}
    for half_queue_id, half_queue_offset in resolutions:
        sizes[half_queue_id] = sizes.get(half_queue_id, 0) + op_body_size([half_queue_offset])

    def note() -> None:
        full = _buffered.add(sizes, threshold=conf.op_msg_max_size)
        for half_queue_id in full:
            try:
                current_app.send_task(OP_FLUSH_TASK, args=[half_queue_id])
            except Exception:  # noqa: BLE001 - the beat flush will write it within the interval
                logger.warning(
                    "could not queue an Op flush of half queue %d", half_queue_id, exc_info=True
                )

    transaction.on_commit(note)


def op_flush(*, half_queue_id: int, force: bool = False) -> int:
    """Write the unflushed resolutions of one half queue as Op messages, by RIP-50's rule: a
    full Op message (``HALFMOON_OP_MSG_MAX_SIZE`` bytes of offsets) is written at once; the
    rest waits until its oldest resolution is ``HALFMOON_OP_BATCH_INTERVAL_MS`` old (or
    ``force``). Every flusher (beat, the end of a scan, the size trigger) goes through this
    rule, so the Op message rate follows the load, not how often flushers run.

    Returns how many Op messages were written. Rows locked by a concurrent flush are skipped
    (``SKIP LOCKED``), so two flushers never write the same offset. At most
    ``OP_FLUSH_LIMIT`` resolutions per call.
    """
    max_size = conf.op_msg_max_size
    interval = conf.op_batch_interval_ms
    written = 0
    with transaction.atomic():
        rows = list(
            Resolution.objects.select_for_update(skip_locked=True)
            .filter(half_queue_id=half_queue_id, op_commit_log_offset__isnull=True)
            .order_by("half_queue_offset")
            .values_list("pk", "half_queue_offset", "resolved_timestamp")[:OP_FLUSH_LIMIT]
        )
        if not rows:
            return 0
        due = force or now_ms() - min(r[2] for r in rows) >= interval
        batch: list[int] = []  # Resolution ids
        offsets: list[int] = []  # their half queue offsets, the body of one Op message
        size = 0
        for pk, offset, _ in rows:
            entry_size = op_body_size([offset])
            if offsets and size + entry_size > max_size:
                _op_write(half_queue_id, offsets, batch)  # a full Op message
                written += 1
                batch, offsets, size = [], [], 0
            batch.append(pk)
            offsets.append(offset)
            size += entry_size
        if batch and due:
            _op_write(half_queue_id, offsets, batch)
            written += 1
    return written


def _op_write(half_queue_id: int, offsets: list[int], resolution_ids: list[int]) -> None:
    """Store one Op message naming ``offsets`` and mark its resolutions flushed."""
    op = message_put(
        topic=OP_HALF_TOPIC,
        queue_id=half_queue_id,
        msg_id=new_msg_id(),
        body=op_body_format(offsets),
        tags=OP_REMOVE_TAG,
        system_queue_nums=conf.half_queue_nums,
    )
    Resolution.objects.filter(pk__in=resolution_ids).update(
        op_commit_log_offset=op.commit_log_offset
    )


def op_flush_all() -> int:
    """Flush every half queue that has unflushed resolutions; return Op messages written."""
    queues = (
        Resolution.objects.filter(op_commit_log_offset__isnull=True)
        .values_list("half_queue_id", flat=True)
        .distinct()
    )
    return sum(op_flush(half_queue_id=q) for q in sorted(queues))

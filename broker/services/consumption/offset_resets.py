"""A consumer group's offset resets (rocketmq-dashboard's "reset offset", RocketMQ
``resetOffsetByTime``) and "skip the backlog" (offsets to the queue ends), each previewed as a
frozen per-queue plan (``broker.rules.offset_resets``) in an ``AuditEntry`` (``reset-offset``
/ ``skip-backlog``; ``scope.queues``), then applied exactly as previewed with the reason, in
ONE database transaction holding the group's ``ConsumerOffset`` rows of those topics (a
concurrent receive skips them, ``SKIP LOCKED``):

- a queue moved BACK keeps its offset: the previewed messages ``[new, current)`` are made
  visible to the group again (``broker.services.consumption.redelivery``); messages taken
  after the preview are not in the set;
- a queue moved FORWARD gets ``max(held, new)`` (``offset_forwarded``): never backward.

See docs/console.md, "Consumer groups".
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.db import transaction

from broker.errors import Conflict, InvalidInput
from broker.models import AuditEntry, ConsumerOffset, Message
from broker.rules.clock import now_ms
from broker.rules.offset_resets import offset_forwarded, offset_reset_plan, plan_totals
from broker.selectors.consumer_groups import (
    OFFSET_RESET_ACTIONS,
    consumer_group_of_entry,
    consumer_group_op_get,
    offset_reset_positions,
)
from broker.services.consumption.fifo_take import fifo_taken_forget
from broker.services.consumption.redelivery import consumer_group_checked, messages_redeliver
from broker.services.operations.audit import actor_checked, reason_checked

logger = logging.getLogger("halfmoon.consumer_group_ops")


def _reset_preview(
    *,
    action: str,
    consumer_group: str,
    topic: str | None,
    timestamp: int | None,
    actor: str,
    via: str,
    allowed_consumer_groups: Collection[str] | None,
) -> AuditEntry:
    actor = actor_checked(actor)
    group = consumer_group_checked(consumer_group, allowed_consumer_groups)
    plans = offset_reset_plan(
        offset_reset_positions(consumer_group=group, topic=topic or None, timestamp=timestamp)
    )
    if not plans:
        raise InvalidInput(
            f"Consumer group {group} has no offset"
            + (f" on topic {topic}" if topic else "")
            + ": it has not received from it yet.",
            code="no_offsets",
            details={"consumer_group": group, "topic": topic or None},
        )
    redeliver, skip = plan_totals(plans)
    what = (
        f"reset to {timestamp} ms" if action == AuditEntry.Action.RESET_OFFSET else "skip backlog"
    )
    entry = AuditEntry.objects.create(
        actor=actor,
        via=via,
        action=action,
        reason="",
        state=AuditEntry.State.PREVIEWED,
        result=f"previewed {what}: {redeliver} to deliver again, {skip} to skip",
        scope={
            "consumer_group": group,
            "topic": topic or None,
            "timestamp": timestamp,
            "queues": [p.as_json() for p in plans],
            "redeliver": redeliver,
            "skip": skip,
        },
        total=redeliver + skip,
    )
    logger.info("%s previewed %s #%d of %s", actor, action, entry.pk, group)
    return entry


def offset_reset_preview(
    *,
    consumer_group: str,
    timestamp: int,
    actor: str,
    via: str,
    topic: str | None = None,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Freeze the plan of resetting ``consumer_group``'s offsets to ``timestamp`` (ms, UTC)
    on every topic it has offsets on (or ``topic``) (RocketMQ ``resetOffsetByTime``): a
    ``previewed`` ``reset-offset`` entry whose ``scope`` is ``{consumer_group, topic,
    timestamp, queues: [{topic, queue_id, current, new, direction, redeliver, skip}],
    redeliver: N, skip: M}`` (``total`` N + M). Nothing changes until
    ``offset_reset_apply``.

    Raises:
        InvalidInput: ``invalid_input`` (a negative timestamp), ``no_offsets`` (the group has
            received nothing of that scope yet).
        NotFound: ``consumer_group_not_found``. Forbidden: ``consumer_group_outside_scope``.
    """
    if timestamp < 0:
        raise InvalidInput(
            "timestamp must be a time in ms since the epoch.",
            details={"fields": {"timestamp": ["Ensure this value is at least 0."]}},
        )
    return _reset_preview(
        action=AuditEntry.Action.RESET_OFFSET,
        consumer_group=consumer_group,
        topic=topic,
        timestamp=timestamp,
        actor=actor,
        via=via,
        allowed_consumer_groups=allowed_consumer_groups,
    )


def backlog_skip_preview(
    *,
    consumer_group: str,
    actor: str,
    via: str,
    topic: str | None = None,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Freeze the plan of moving ``consumer_group``'s offsets to the queue ends
    (``ConsumeQueue.max_offset``; the dashboard's "skip accumulated"): a ``previewed``
    ``skip-backlog`` entry, shaped as ``offset_reset_preview``'s (``timestamp`` None).

    Raises:
        as ``offset_reset_preview``.
    """
    return _reset_preview(
        action=AuditEntry.Action.SKIP_BACKLOG,
        consumer_group=consumer_group,
        topic=topic,
        timestamp=None,
        actor=actor,
        via=via,
        allowed_consumer_groups=allowed_consumer_groups,
    )


def offset_reset_apply(
    *,
    reset_id: int,
    reason: str | None,
    actor: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Apply a previewed reset or skip exactly as previewed (see the module docstring), in one
    database transaction holding the group's offsets of its topics; the entry becomes
    ``done`` with the reason, ``applied_by``, ``counts`` ``{redelivered, skipped}`` (what was
    actually done: a message pruned since the preview is not redelivered; a queue a receive
    moved past the new offset skips less) and ``result``.

    Returns:
        the entry.

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``offset_reset_not_found``.
        Conflict: ``offset_reset_applied`` (applied already).
        Forbidden: ``consumer_group_outside_scope``.
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    entry = consumer_group_op_get(reset_id, OFFSET_RESET_ACTIONS)
    group = consumer_group_checked(consumer_group_of_entry(entry), allowed_consumer_groups)
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=entry.pk)
        if entry.state != AuditEntry.State.PREVIEWED:
            raise Conflict(
                f"{entry.action} {entry.pk} was applied already: {entry.result}.",
                code="offset_reset_applied",
                details={"id": entry.pk},
            )
        queues = entry.scope["queues"]
        topics = sorted({q["topic"] for q in queues})
        held = {
            (o.topic, o.queue_id): o
            for o in ConsumerOffset.objects.select_for_update()
            .filter(consumer_group=group, topic__in=topics)
            .order_by("topic", "queue_id")
        }
        now = now_ms()
        redelivered = skipped = 0
        for q in queues:
            if q["direction"] == "back":
                ids = list(
                    Message.objects.filter(
                        topic=q["topic"],
                        queue_id=q["queue_id"],
                        queue_offset__gte=q["new"],
                        queue_offset__lt=q["current"],
                    )
                    .order_by("commit_log_offset")
                    .values_list("commit_log_offset", flat=True)
                )
                redelivered += messages_redeliver(group, ids, now)
            elif q["direction"] == "forward":
                row = held.get((q["topic"], q["queue_id"]))
                if row is None:
                    continue
                new = offset_forwarded(held=row.offset, new=q["new"])
                if new != row.offset:
                    skipped += new - row.offset
                    row.offset = new
                    row.save(update_fields=["offset"])
                    fifo_taken_forget(
                        consumer_group=group, topic=row.topic, queue_id=row.queue_id, below=new
                    )
        entry.reason = reason
        entry.state = AuditEntry.State.DONE
        entry.applied_by = actor
        entry.applied_timestamp = entry.finished_timestamp = now
        entry.counts = {"redelivered": redelivered, "skipped": skipped}
        entry.processed = redelivered + skipped
        entry.result = f"{redelivered} delivered again, {skipped} skipped"
        entry.save(
            update_fields=[
                "reason",
                "state",
                "applied_by",
                "applied_timestamp",
                "finished_timestamp",
                "counts",
                "processed",
                "result",
            ]
        )
    logger.info("%s applied %s #%d of %s: %s", actor, entry.action, entry.pk, group, entry.result)
    return entry

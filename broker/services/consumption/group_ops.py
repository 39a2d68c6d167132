"""Operator actions on one consumer group (the console's and the API's consumer-group
operations; rocketmq-dashboard's "reset offset", "skip accumulated" and DLQ resend).

- **Reset the offsets to a time** (RocketMQ ``resetOffsetByTime``) and **skip the backlog**
  (offsets to the queue ends): ``offset_reset_preview`` / ``backlog_skip_preview`` freeze the
  per-queue plan (``broker.rules.offset_resets``) in a ``previewed`` ``AuditEntry``
  (``reset-offset`` / ``skip-backlog``; ``scope.queues``); ``offset_reset_apply`` applies
  exactly that plan with the reason, in ONE database transaction holding the group's
  ``ConsumerOffset`` rows of those topics (``SELECT ... FOR UPDATE``; a concurrent receive
  skips them, ``SKIP LOCKED``, and takes nothing from them meanwhile):

  * a queue moved BACK does not move its offset: the previewed messages ``[new, current)`` get
    a ``Delivery`` of the group, visible now, ``delivery_attempt`` 0 and a new receipt handle
    (``_redeliver``: an upsert, so an in-flight delivery of one of them is superseded and its
    old handle no longer acks), journalled ``redelivery``. The receive path (expired deliveries
    first) hands each out once more, as attempt 1. Messages taken after the preview are not
    in the set;
  * a queue moved FORWARD gets ``max(held, new)`` (``offset_forwarded``): never backward.

- **Resend one message to one group** (``message_resend``): the same upsert for that message
  and that group only.
- **The group's dead letters** (``%DLQ%{group}``): resend one (``dead_letter_resend``: the
  upsert of its ORIGINAL message for the group), or a frozen set (``dead_letters_preview``:
  all the dead letters stored up to now, or a selection, as the entry's ``AuditTarget`` rows,
  ``pending``; ``dead_letters_apply`` queues the Celery task
  ``tasks.operations.dead_letter_resend_run``, which runs ``dead_letters_run``: each pending
  target in its own database transaction, ``done`` or ``failed`` (the original is gone), with
  live progress as the bulk actions, ``broker.services.operations.bulk.TargetProgress``). A dead letter
  arriving after the preview is not in the set; a target done is never resent by the set again.

Every action needs a reason and is audited (``AuditEntry``); ``allowed_consumer_groups`` is
None for a full operator, else the groups a scoped operator may operate (another group:
``Forbidden`` ``consumer_group_outside_scope``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from celery import current_app
from django.db import connection, transaction

from broker.constants import dlq_topic
from broker.errors import Conflict, Forbidden, InvalidInput, NotFound, not_found
from broker.lookups import consumer_group_by_name
from broker.models import (
    AuditEntry,
    AuditTarget,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    now_ms,
)
from broker.plumbing.sql import statement_cursor
from broker.rules.offset_resets import offset_forwarded, offset_reset_plan, plan_totals
from broker.rules.topics import is_undeliverable_topic
from broker.selectors.consumer_groups import (
    DEAD_LETTER_SET_ACTIONS,
    OFFSET_RESET_ACTIONS,
    consumer_group_of_entry,
    consumer_group_op_get,
    dead_letter_get,
    dead_letter_original,
    offset_reset_positions,
)
from broker.services.consumption.receive import receipt_handle_new
from broker.services.operations.audit import actor_checked, audit_entry_record, reason_checked
from broker.services.operations.bulk import TargetProgress

logger = logging.getLogger("halfmoon.consumer_group_ops")

DEAD_LETTERS_MAX = 10_000  # a dead-letter set's targets, as a bulk action's
DEAD_LETTER_RUN_TASK = "tasks.operations.dead_letter_resend_run"
_REDELIVER_CHUNK = 5_000  # messages per upsert statement (~0.1 s)

Result = AuditTarget.Result


def _group_checked(consumer_group: str, allowed: Collection[str] | None) -> str:
    """``consumer_group`` if it exists and the operator may operate it.

    Raises:
        NotFound: ``consumer_group_not_found``.
        Forbidden: ``consumer_group_outside_scope`` (a scoped operator, another group).
    """
    if consumer_group_by_name(consumer_group) is None:
        raise not_found("consumer_group", consumer_group)
    if allowed is not None and consumer_group not in allowed:
        raise Forbidden(
            f"You may not operate consumer group {consumer_group}.",
            code="consumer_group_outside_scope",
            details={"consumer_group": consumer_group},
        )
    return consumer_group


def _redeliver(consumer_group: str, message_ids: Sequence[int], now: int) -> int:
    """Make ``message_ids`` (commit log offsets) visible to ``consumer_group`` now: one
    ``Delivery`` each (``INSERT ... ON CONFLICT (consumer_group, message) DO UPDATE``), attempt
    0 (the next receive hands it out as attempt 1), a new receipt handle, journalled
    ``redelivery``. Must run inside the caller's ``transaction.atomic()``. A delivery locked
    by a concurrent receive is updated after that receive commits (its handle then fails).

    Returns:
        the messages made visible (those still stored).
    """
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    journal = DeliveryEvent._meta.db_table
    qn = connection.ops.quote_name
    sql = (
        f"WITH src AS (SELECT * FROM unnest(%(ids)s::bigint[], %(handles)s::text[]) "
        "AS s(message_id, handle)), "
        f"up AS (INSERT INTO {deliveries} (consumer_group, message_id, topic, delivery_attempt, "
        "invisible_until_timestamp, receipt_handle) SELECT %(group)s, m.commit_log_offset, "
        f"m.topic, 0, %(now)s, s.handle FROM src s JOIN {messages} m "
        "ON m.commit_log_offset = s.message_id ORDER BY m.commit_log_offset "
        "ON CONFLICT (consumer_group, message_id) DO UPDATE SET delivery_attempt = 0, "
        "invisible_until_timestamp = EXCLUDED.invisible_until_timestamp, "
        "receipt_handle = EXCLUDED.receipt_handle RETURNING message_id), "
        f"journalled AS (INSERT INTO {journal} (consumer_group, topic, queue_id, queue_offset, "
        f"commit_log_offset, msg_id, kind, delivery_attempt, {qn('timestamp')}) "
        "SELECT %(group)s, m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id, "
        f"%(kind)s, 0, %(now)s FROM up JOIN {messages} m ON m.commit_log_offset = up.message_id "
        "ORDER BY m.commit_log_offset) SELECT count(*) FROM up"
    )
    done = 0
    for start in range(0, len(message_ids), _REDELIVER_CHUNK):
        ids = list(message_ids[start : start + _REDELIVER_CHUNK])
        params = {
            "ids": ids,
            "handles": [receipt_handle_new() for _ in ids],
            "group": consumer_group,
            "now": now,
            "kind": DeliveryEvent.Kind.REDELIVERY.value,
        }
        with statement_cursor() as cursor:
            cursor.execute(sql, params)
            done += cursor.fetchone()[0]
    return done


# --- offset resets ------------------------------------------------------------------------


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
    group = _group_checked(consumer_group, allowed_consumer_groups)
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
    group = _group_checked(consumer_group_of_entry(entry), allowed_consumer_groups)
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
                redelivered += _redeliver(group, ids, now)
            elif q["direction"] == "forward":
                row = held.get((q["topic"], q["queue_id"]))
                if row is None:
                    continue
                new = offset_forwarded(held=row.offset, new=q["new"])
                if new != row.offset:
                    skipped += new - row.offset
                    row.offset = new
                    row.save(update_fields=["offset"])
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


# --- resends ------------------------------------------------------------------------------


def message_resend(
    *,
    consumer_group: str,
    commit_log_offset: int,
    reason: str | None,
    actor: str,
    via: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Deliver the message at ``commit_log_offset`` once more to ``consumer_group`` only:
    ``_redeliver`` of that one message (visible now, attempt 0, new handle, journalled
    ``redelivery``), audited ``resend-message`` (``done``; ``scope``: ``{consumer_group,
    commit_log_offset, msg_id, topic}``) in the same database transaction.

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``consumer_group_not_found``, ``message_not_found``.
        Forbidden: ``consumer_group_outside_scope``; ``system_topic`` (half, Op and discarded
            messages are never delivered).
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    group = _group_checked(consumer_group, allowed_consumer_groups)
    message = Message.objects.filter(commit_log_offset=commit_log_offset).first()
    if message is None:
        raise not_found("message", str(commit_log_offset))
    if is_undeliverable_topic(message.topic):
        raise Forbidden(
            f"Messages of the system topic {message.topic} are never delivered.",
            code="system_topic",
            details={"topic": message.topic},
        )
    with transaction.atomic():
        _redeliver(group, [message.commit_log_offset], now_ms())
        entry = audit_entry_record(
            action=AuditEntry.Action.RESEND_MESSAGE,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=f"message {message.msg_id} of {message.topic} delivered again to {group}",
            targets={},
            scope={
                "consumer_group": group,
                "commit_log_offset": message.commit_log_offset,
                "msg_id": message.msg_id,
                "topic": message.topic,
            },
        )
    return entry


def dead_letter_resend(
    *,
    consumer_group: str,
    commit_log_offset: int,
    reason: str | None,
    actor: str,
    via: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Resend one dead letter of ``consumer_group`` (``commit_log_offset`` of its copy on
    ``%DLQ%{group}``) to the group: the ORIGINAL message (its ``RETRY_TOPIC`` and
    ``ORIGIN_MESSAGE_ID``) is made visible to the group now (``_redeliver``), audited
    ``resend-dead-letter`` with the dead letter as its target (``done``, ``detail``: the
    original's ``commit_log_offset``, ``msg_id``, ``topic``), in one database transaction.

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``consumer_group_not_found``, ``dead_letter_not_found``,
            ``original_message_not_found`` (the original is no longer stored).
        Forbidden: ``consumer_group_outside_scope``.
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    group = _group_checked(consumer_group, allowed_consumer_groups)
    dead = dead_letter_get(consumer_group=group, commit_log_offset=commit_log_offset)
    original = dead_letter_original(dead)
    if original is None:
        raise NotFound(
            f"The original message {dead.origin_msg_id} of {dead.origin_topic} is no longer "
            "stored.",
            code="original_message_not_found",
            details={"msg_id": dead.origin_msg_id, "topic": dead.origin_topic},
        )
    with transaction.atomic():
        _redeliver(group, [original.commit_log_offset], now_ms())
        entry = audit_entry_record(
            action=AuditEntry.Action.RESEND_DEAD_LETTER,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=f"dead letter {original.msg_id} resent to {group}",
            targets={str(commit_log_offset): (Result.DONE, _original_detail(original))},
            scope={"consumer_group": group, "dead_letters": [commit_log_offset]},
        )
    return entry


def _original_detail(original: Message) -> dict[str, Any]:
    return {
        "original_commit_log_offset": original.commit_log_offset,
        "msg_id": original.msg_id,
        "topic": original.topic,
    }


def dead_letters_preview(
    *,
    consumer_group: str,
    actor: str,
    via: str,
    commit_log_offsets: Sequence[int] | None = None,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Freeze a set of ``consumer_group``'s dead letters to resend: the selected ones
    (``commit_log_offsets`` of their DLQ copies; others are skipped and listed in
    ``scope.skipped``) or, when None, every dead letter stored now (``scope.until``: the
    highest commit log offset frozen). A ``previewed`` ``resend-dead-letters`` entry whose
    ``AuditTarget`` rows (``pending``, oldest first) are the dead letters' commit log offsets,
    at most ``DEAD_LETTERS_MAX``. Dead letters arriving later are not in it.

    Raises:
        InvalidInput: ``dead_letters_empty``, ``dead_letters_too_many``.
        NotFound: ``consumer_group_not_found``. Forbidden: ``consumer_group_outside_scope``.
    """
    actor = actor_checked(actor)
    group = _group_checked(consumer_group, allowed_consumer_groups)
    qs = Message.objects.filter(topic=dlq_topic(group))
    scope: dict[str, Any] = {"consumer_group": group}
    if commit_log_offsets is not None:
        wanted = list(dict.fromkeys(int(o) for o in commit_log_offsets))
        qs = qs.filter(commit_log_offset__in=wanted)
        scope["kind"] = "selection"
        scope["selected"] = len(wanted)
    else:
        scope["kind"] = "all"
    rows = list(
        qs.order_by("commit_log_offset").values_list("commit_log_offset", "msg_id")[
            : DEAD_LETTERS_MAX + 1
        ]
    )
    if len(rows) > DEAD_LETTERS_MAX:
        raise InvalidInput(
            f"More than {DEAD_LETTERS_MAX} dead letters: select fewer.",
            code="dead_letters_too_many",
            details={"max": DEAD_LETTERS_MAX},
        )
    if not rows:
        raise InvalidInput(
            f"Consumer group {group} has no dead letter to resend here.",
            code="dead_letters_empty",
            details={"consumer_group": group},
        )
    if commit_log_offsets is not None:
        found = {o for o, _ in rows}
        scope["skipped"] = [o for o in wanted if o not in found][:100]
    scope["until"] = rows[-1][0]
    with transaction.atomic():
        entry = audit_entry_record(
            action=AuditEntry.Action.RESEND_DEAD_LETTERS,
            actor=actor,
            via=via,
            reason="",
            state=AuditEntry.State.PREVIEWED,
            result=f"previewed: {len(rows)} dead letters to resend to {group}",
            targets={str(o): (Result.PENDING, {"dead_letter_msg_id": m}) for o, m in rows},
            scope=scope,
        )
    return entry


def dead_letters_apply(
    *,
    resend_id: int,
    reason: str | None,
    actor: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Confirm a previewed dead-letter set with ``reason``: ``queued`` (``applied_by``,
    ``applied_timestamp``) and, once this commits, send the task
    ``tasks.operations.dead_letter_resend_run``. Confirming a queued or running set again sends
    the task again (a resume: done targets are skipped); the first reason and confirmer stay.

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``dead_letter_resend_not_found``.
        Conflict: ``dead_letter_resend_done``. Forbidden: ``consumer_group_outside_scope``.
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    entry = consumer_group_op_get(resend_id, DEAD_LETTER_SET_ACTIONS)
    _group_checked(consumer_group_of_entry(entry), allowed_consumer_groups)
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=entry.pk)
        if entry.state == AuditEntry.State.DONE:
            raise Conflict(
                f"Dead-letter resend {entry.pk} has finished: {entry.result}.",
                code="dead_letter_resend_done",
                details={"id": entry.pk},
            )
        if entry.state == AuditEntry.State.PREVIEWED:
            entry.state = AuditEntry.State.QUEUED
            entry.reason = reason
            entry.applied_by = actor
            entry.applied_timestamp = now_ms()
            entry.save(update_fields=["state", "reason", "applied_by", "applied_timestamp"])
        pk = entry.pk
        transaction.on_commit(lambda: current_app.send_task(DEAD_LETTER_RUN_TASK, args=[pk]))
    return entry


def dead_letters_run(resend_id: int) -> AuditEntry:
    """Resend a queued (or interrupted) dead-letter set's pending targets, each in its own
    database transaction (``SKIP LOCKED``; only while ``pending``): the original message made
    visible to the group (``done``, ``detail`` the original), or ``failed``
    (``detail.error``: the original is no longer stored, or the dead letter is gone). Safe to
    run again. Progress as a bulk action's (``TargetProgress``).

    Raises:
        NotFound: ``dead_letter_resend_not_found``. Conflict: ``dead_letter_resend_not_applied``.
    """
    entry = consumer_group_op_get(resend_id, DEAD_LETTER_SET_ACTIONS)
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=entry.pk)
        if entry.state == AuditEntry.State.DONE:
            return entry
        if entry.state == AuditEntry.State.PREVIEWED:
            raise Conflict(
                f"Dead-letter resend {entry.pk} was previewed, not applied.",
                code="dead_letter_resend_not_applied",
                details={"id": entry.pk},
            )
        entry.state = AuditEntry.State.RUNNING
        entry.save(update_fields=["state"])
    group = consumer_group_of_entry(entry)
    progress = TargetProgress(entry)
    last_id = 0
    while batch := list(
        entry.targets.filter(result=Result.PENDING, id__gt=last_id)
        .order_by("id")
        .values_list("id", "transaction_id")[:200]
    ):
        for target_id, dead_offset in batch:
            last_id = target_id
            result = _dead_letter_target_apply(group, target_id, int(dead_offset))
            if result is not None:
                progress.add(result)
    return progress.finish()


def _dead_letter_target_apply(group: str, target_id: int, dead_offset: int) -> str | None:
    """Resend one pending target in one database transaction with its result; None when it
    is not pending any more."""
    with transaction.atomic():
        target = (
            AuditTarget.objects.select_for_update(skip_locked=True)
            .filter(pk=target_id, result=Result.PENDING)
            .first()
        )
        if target is None:
            return None
        try:
            dead = dead_letter_get(consumer_group=group, commit_log_offset=dead_offset)
        except NotFound as exc:
            original = None
            error = exc.message
        else:
            original = dead_letter_original(dead)
            error = f"The original message {dead.origin_msg_id} is no longer stored."
        if original is None:
            target.result = Result.FAILED
            target.detail = {**target.detail, "error": error}
        else:
            _redeliver(group, [original.commit_log_offset], now_ms())
            target.result = Result.DONE
            target.detail = {**target.detail, **_original_detail(original)}
        target.save(update_fields=["result", "detail"])
    return target.result

"""A consumer group's dead letters (``%DLQ%{group}``) resent to it: one
(``dead_letter_resend``: its ORIGINAL message made visible to the group again), or a frozen set
(``broker.services.operations.frozen_sets``): ``dead_letters_preview`` freezes every dead
letter stored now, or a selection, as ``pending`` targets (``AuditTarget.commit_log_offset``:
the DLQ copy's); ``dead_letters_apply`` queues ``tasks.operations.dead_letter_resend_run``,
which runs ``dead_letters_run`` with live progress. A dead letter arriving after the preview
is not in the set; a target done is never resent by the set again.

See docs/console.md, "Consumer groups".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from broker.constants import dlq_topic
from broker.errors import InvalidInput, NotFound
from broker.models import AuditEntry, AuditTarget, Message
from broker.rules.clock import now_ms
from broker.selectors.consumer_groups import (
    DEAD_LETTER_SET_ACTIONS,
    consumer_group_of_entry,
    consumer_group_op_get,
    dead_letter_get,
    dead_letter_original,
)
from broker.services.consumption.redelivery import (
    consumer_group_checked,
    messages_redeliver,
    one_resent_audited,
)
from broker.services.operations.audit import actor_checked, reason_checked
from broker.services.operations.frozen_sets import (
    FrozenSetKind,
    frozen_set_apply,
    frozen_set_freeze,
    frozen_set_run,
)

DEAD_LETTERS_MAX = 10_000  # a dead-letter set's targets, as a bulk action's
DEAD_LETTER_RUN_TASK = "tasks.operations.dead_letter_resend_run"
DEAD_LETTER_SET = FrozenSetKind(
    noun="Dead-letter resend", code="dead_letter_resend", id_key="id", task=DEAD_LETTER_RUN_TASK
)

Result = AuditTarget.Result


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
    ``ORIGIN_MESSAGE_ID``) is made visible to the group now (``messages_redeliver``), audited
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
    group = consumer_group_checked(consumer_group, allowed_consumer_groups)
    dead = dead_letter_get(consumer_group=group, commit_log_offset=commit_log_offset)
    original = dead_letter_original(dead)
    if original is None:
        raise NotFound(
            f"The original message {dead.origin_msg_id} of {dead.origin_topic} is no longer "
            "stored.",
            code="original_message_not_found",
            details={"msg_id": dead.origin_msg_id, "topic": dead.origin_topic},
        )
    return one_resent_audited(
        group,
        original,
        action=AuditEntry.Action.RESEND_DEAD_LETTER,
        actor=actor,
        via=via,
        reason=reason,
        result=f"dead letter {original.msg_id} resent to {group}",
        targets={commit_log_offset: (Result.DONE, _original_detail(original))},
        scope={"consumer_group": group, "dead_letters": [commit_log_offset]},
    )


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
    ``AuditTarget`` rows (``pending``, oldest first) are the dead letters
    (``commit_log_offset``), at most ``DEAD_LETTERS_MAX``. Dead letters arriving later are not in it.

    Raises:
        InvalidInput: ``dead_letters_empty``, ``dead_letters_too_many``.
        NotFound: ``consumer_group_not_found``. Forbidden: ``consumer_group_outside_scope``.
    """
    actor = actor_checked(actor)
    group = consumer_group_checked(consumer_group, allowed_consumer_groups)
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
    return frozen_set_freeze(
        action=AuditEntry.Action.RESEND_DEAD_LETTERS,
        actor=actor,
        via=via,
        reason="",
        result=f"previewed: {len(rows)} dead letters to resend to {group}",
        targets={o: {"dead_letter_msg_id": m} for o, m in rows},
        scope=scope,
    )


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
    consumer_group_checked(consumer_group_of_entry(entry), allowed_consumer_groups)
    return frozen_set_apply(entry.pk, DEAD_LETTER_SET, actor=actor, reason=reason)


def dead_letters_run(resend_id: int) -> AuditEntry:
    """Resend a queued (or interrupted) dead-letter set's pending targets
    (``frozen_set_run``): each dead letter's original message made visible to the group
    (``done``, ``detail`` the original), or ``failed`` (``detail.error``: the original is no
    longer stored, or the dead letter is gone). Safe to run again.

    Raises:
        NotFound: ``dead_letter_resend_not_found``. Conflict: ``dead_letter_resend_not_applied``.
    """
    entry = consumer_group_op_get(resend_id, DEAD_LETTER_SET_ACTIONS)
    return frozen_set_run(entry.pk, DEAD_LETTER_SET, _dead_letter_act)


def _dead_letter_act(entry: AuditEntry, target: AuditTarget) -> tuple[str, dict[str, Any]]:
    """Resend one target's dead letter to the set's group (a ``TargetAction``)."""
    group = consumer_group_of_entry(entry)
    try:
        dead = dead_letter_get(consumer_group=group, commit_log_offset=target.commit_log_offset)
    except NotFound as exc:
        return Result.FAILED, {"error": exc.message}
    original = dead_letter_original(dead)
    if original is None:
        return Result.FAILED, {
            "error": f"The original message {dead.origin_msg_id} is no longer stored."
        }
    messages_redeliver(group, [original.commit_log_offset], now_ms())
    return Result.DONE, _original_detail(original)

"""Operator actions on a transaction: resolve it by hand, resume its back-checks (RocketMQ's
admin ``resumeCheckHalfMessage``) or ask for a back-check now; the console's buttons and the
API's operator endpoints.

More: docs/design.md, "Module notes", broker/services/transactions/operator.py."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from broker.conf import conf
from broker.constants import HALF_TOPIC, SYS_FLAG_TRANSACTION_PREPARED_TYPE
from broker.models import AuditEntry, CheckRequest, Message, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.rules.states import (
    RESOLVING_ACTIONS,
    ResolvedBy,
    ResolvingAction,
    TransactionState,
    resolution_of_action,
    state_of_action,
)
from broker.services.commitlog.storage import message_copy
from broker.services.commitlog.validation import action_validate
from broker.services.operations.audit import (
    ENDED_STATES,
    NO_REASON_GIVEN,
    actor_checked,
    ended_refusal,
    operator_action_audited,
    reason_checked,
    state_refusal,
)
from broker.services.transactions.end import transaction_get_locked
from broker.services.transactions.events import transaction_announce, transaction_event_record
from broker.services.transactions.resolution import transaction_resolve_locked

logger = logging.getLogger("halfmoon.operator")

Via = AuditEntry.Via


def transaction_operator_resolve(
    *,
    transaction_id: str,
    action: ResolvingAction,
    reason: str | None,
    actor: str,
    via: str = Via.API,
    bulk: AuditEntry | None = None,
) -> Transaction:
    """Commit or roll back a PREPARED or DISCARDED transaction by hand, exactly once.

    RocketMQ has no such action: a discarded half message is only copied to
    ``TRANS_CHECK_MAX_TIME_TOPIC`` and an operator must re-send it by hand (dashboard #4435).
    Here the operator's commit delivers the half message to its real topic and queue with its
    own msg_id, through the same ``transaction_resolve_locked`` as a producer's end (so the
    same unique constraints make a second delivery impossible), and a rollback drops it.

    Args:
        transaction_id: the transaction (= msg_id, UNIQ_KEY).
        action: ``"commit"`` or ``"rollback"``.
        reason: why, required (blank after stripping is refused); at most 1024 characters.
            Kept in the ``Resolution`` row, the event and the audit entry.
        actor: who acts: ``"operator:<access key name>"`` (API) or ``"console:<username>"``
            (at most 160 characters).
        via: ``AuditEntry.Via``: ``api`` (default) or ``console``.
        bulk: the bulk's ``AuditEntry`` when this is one target of a bulk action (no entry of
            its own is written; the bulk records the result).

    Returns:
        the transaction after the resolution: ``state`` COMMITTED (with ``queue_offset`` of the
        delivered message) or ROLLED_BACK, ``resolved_by`` ``operator``, ``discard_reason``
        empty.

    Also writes ``TransactionEvent(kind="resolved", outcome="COMMIT"|"ROLLBACK", actor=actor,
    detail={"reason", "via", "audit_entry_id", "previous_state"[, "discard_reason"]})`` and an
    ``AuditEntry`` (``broker.services.operations.audit.operator_action_audited``). ``discard_reason`` is
    cleared: it describes the DISCARDED state only (the rebuild derives it empty for every
    resolved transaction); the discard stays visible in its ``discarded`` event, in this
    event's detail and in the copy on ``TRANS_CHECK_MAX_TIME_TOPIC``.

    Raises:
        InvalidInput: ``invalid_action``; ``reason_required`` (missing or blank);
            ``reason_too_long``. Checked before the transaction is looked up; not audited.
        NotFound: ``transaction_not_found``.
        TransactionAlreadyResolved: 409 ``transaction_already_resolved`` when it is COMMITTED
            or ROLLED_BACK, whoever resolved it, this operator included (a second resolve
            delivers nothing); ``details``: ``state``, ``resolved_by``, ``resolved_timestamp``,
            ``resolved_at``, ``actor``, ``reason``, ``ended_by`` (``transaction_ended``).
    """
    action_validate(action, RESOLVING_ACTIONS)
    reason = reason_checked(reason, transaction_id=transaction_id)
    actor = actor_checked(actor)

    def apply(audit: dict[str, Any]) -> Transaction:
        tx = transaction_get_locked(transaction_id)
        if tx.state in ENDED_STATES:
            raise ended_refusal(tx)
        previous_state = tx.state
        detail: dict[str, Any] = {**audit, "previous_state": previous_state}
        if previous_state == TransactionState.DISCARDED:
            detail["discard_reason"] = tx.discard_reason
        transaction_resolve_locked(
            tx, action=action, resolved_by=ResolvedBy.OPERATOR, reason=reason
        )
        if tx.discard_reason:
            tx.discard_reason = ""
            tx.save(update_fields=["discard_reason"])
        transaction_event_record(
            tx,
            TransactionEvent.Kind.RESOLVED,
            timestamp=tx.resolved_timestamp,
            actor=actor,
            outcome=resolution_of_action(action),
            detail=detail,
        )
        logger.info(
            "%s %s %s (was %s): %s", actor, action, transaction_id, previous_state, reason[:200]
        )
        return tx

    return operator_action_audited(
        action=action,
        transaction_id=transaction_id,
        actor=actor,
        via=via,
        reason=reason,
        bulk=bulk,
        done=state_of_action(action),
        apply=apply,
    )


def transaction_resume_check(
    *,
    transaction_id: str,
    actor: str,
    reason: str | None = None,
    via: str = Via.API,
    bulk: AuditEntry | None = None,
) -> Transaction:
    """Put a DISCARDED transaction back under back-check (RocketMQ ``resumeCheckHalfMessage``).
    Not a commit: the producer is asked again.

    As RocketMQ does, the half message is re-appended to the half queue: a copy of the current
    half message (same msg_id / UNIQ_KEY, body, tags, keys and properties, ``sys_flag``
    PREPARED, same ``born_timestamp``) goes to ``RMQ_SYS_TRANS_HALF_TOPIC`` on the
    transaction's half queue, and the transaction now points at that copy's half queue offset
    and commit log offset. The transaction becomes PREPARED with ``check_times`` 0 (and no
    undelivered checks, no resolution, no discard reason) and is due at once: the next scan
    checks it, the first check carrying ``check_times`` 1. Queued poll requests of its earlier
    checks are dropped. After ``HALFMOON_TRANSACTION_CHECK_MAX`` more unresolved checks it is
    discarded again.

    ``born_timestamp`` is kept, so a transaction older than ``HALFMOON_FILE_RESERVED_HOURS`` is
    discarded again (reason ``file_reserved_time``) at the next scan, unchecked, as in
    RocketMQ, whose re-put half message keeps its born time; commit or roll it back with
    ``transaction_operator_resolve`` instead.

    The check count lives in the check journal, not in a property: the ``resumed`` event
    written here (``TransactionEvent(kind="resumed", actor=actor, detail={...})`` with the
    previous check count, discard reason and half offsets, plus ``reason``, ``via`` and
    ``audit_entry_id``) is where the rebuild starts counting ``check_times`` again. The
    console is told (``resumed``). Audited as ``resume-check``.

    Args:
        transaction_id: the transaction (= msg_id, UNIQ_KEY).
        actor: who acts, as for ``transaction_operator_resolve``.
        reason: why; required from the console. The API's resume-check (api-v1) does not
            require one: without it ``NO_REASON_GIVEN`` is recorded.
        via: ``api`` (default) or ``console``; ``bulk``: as for
            ``transaction_operator_resolve``.

    Returns:
        the transaction, PREPARED.

    Raises:
        InvalidInput: ``reason_required`` / ``reason_too_long`` (not audited).
        NotFound: ``transaction_not_found``.
        Conflict: 409 ``transaction_not_discarded`` with ``details.state`` when it is not
            DISCARDED, and ``transaction_ended`` fields when it has ended.
    """
    if via == Via.API and not (reason or "").strip():
        reason = NO_REASON_GIVEN
    reason = reason_checked(reason, transaction_id=transaction_id)
    actor = actor_checked(actor)

    def apply(audit: dict[str, Any]) -> Transaction:
        tx = transaction_get_locked(transaction_id)
        if tx.state != TransactionState.DISCARDED:
            raise state_refusal(tx, TransactionState.DISCARDED, "transaction_not_discarded")
        copy = message_copy(
            Message.objects.get(pk=tx.half_commit_log_offset),
            topic=HALF_TOPIC,
            queue_id=tx.half_queue_id,
            sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
            system_queue_nums=conf.half_queue_nums,
        )
        now = now_ms()
        detail = {
            **audit,
            "previous_check_times": tx.check_times,
            "discard_reason": tx.discard_reason,
            "previous_half_queue_offset": tx.half_queue_offset,
            "previous_half_commit_log_offset": tx.half_commit_log_offset,
            "half_queue_offset": copy.queue_offset,
            "half_commit_log_offset": copy.commit_log_offset,
        }
        tx.half_queue_offset = copy.queue_offset
        tx.half_commit_log_offset = copy.commit_log_offset
        tx.state = TransactionState.PREPARED
        tx.resolved_by = None
        tx.resolved_timestamp = None
        tx.discard_reason = ""
        tx.check_times = 0
        tx.undelivered_checks = 0
        tx.last_check_timestamp = None
        tx.next_check_timestamp = now
        tx.save(
            update_fields=[
                "half_queue_offset",
                "half_commit_log_offset",
                "state",
                "resolved_by",
                "resolved_timestamp",
                "discard_reason",
                "check_times",
                "undelivered_checks",
                "last_check_timestamp",
                "next_check_timestamp",
            ]
        )
        CheckRequest.objects.filter(transaction=tx, delivered_timestamp__isnull=True).delete()
        transaction_event_record(
            tx, TransactionEvent.Kind.RESUMED, timestamp=now, actor=actor, detail=detail
        )
        transaction_announce(tx, "resumed")
        logger.info("%s resumed checks of %s (was discarded: %s)", actor, transaction_id, detail)
        return tx

    return operator_action_audited(
        action=AuditEntry.Action.RESUME_CHECK,
        transaction_id=transaction_id,
        actor=actor,
        via=via,
        reason=reason,
        bulk=bulk,
        done=TransactionState.PREPARED,
        apply=apply,
    )


def transaction_check_now(
    *,
    transaction_id: str,
    reason: str | None,
    actor: str,
    via: str = Via.API,
    bulk: AuditEntry | None = None,
) -> Transaction:
    """Ask for a back-check of a PREPARED transaction at the next scan ("check now").

    ``next_check_timestamp`` becomes now, so the next scan of its half queue claims it (unless
    its producer group is in check backoff or over its rate limit, which still apply); the
    check interval and the check immunity are not waited for. It is not a check and does not
    count as one: ``check_times`` is unchanged, and a transaction at the check max is
    discarded by that scan, as by any other. Writes ``TransactionEvent(kind="check_requested",
    actor=actor, detail={"reason", "via", "audit_entry_id", "previous_next_check_timestamp"})``,
    announces ``check_requested`` and is audited as ``check-now``.

    Args:
        transaction_id, reason, actor, via, bulk: as for ``transaction_operator_resolve``.

    Returns:
        the transaction, still PREPARED, due now.

    Raises:
        InvalidInput: ``reason_required`` / ``reason_too_long`` (not audited).
        NotFound: ``transaction_not_found``.
        TransactionAlreadyResolved: 409 when it is COMMITTED or ROLLED_BACK, with what ended it.
        Conflict: 409 ``transaction_not_prepared`` when it is DISCARDED (resume its checks).
    """
    reason = reason_checked(reason, transaction_id=transaction_id)
    actor = actor_checked(actor)

    def apply(audit: dict[str, Any]) -> Transaction:
        tx = transaction_get_locked(transaction_id)
        if tx.state in ENDED_STATES:
            raise ended_refusal(tx)
        if tx.state != TransactionState.PREPARED:
            raise state_refusal(tx, TransactionState.PREPARED, "transaction_not_prepared")
        now = now_ms()
        detail = {**audit, "previous_next_check_timestamp": tx.next_check_timestamp}
        tx.next_check_timestamp = now
        tx.save(update_fields=["next_check_timestamp"])
        transaction_event_record(
            tx, TransactionEvent.Kind.CHECK_REQUESTED, timestamp=now, actor=actor, detail=detail
        )
        transaction_announce(tx, "check_requested")
        logger.info("%s asked for a check of %s now: %s", actor, transaction_id, reason[:200])
        return tx

    return operator_action_audited(
        action=AuditEntry.Action.CHECK_NOW,
        transaction_id=transaction_id,
        actor=actor,
        via=via,
        reason=reason,
        bulk=bulk,
        done="check requested",
        apply=apply,
    )


OPERATOR_ACTIONS: dict[str, Callable[..., Transaction]] = {
    "commit": functools.partial(transaction_operator_resolve, action="commit"),
    "rollback": functools.partial(transaction_operator_resolve, action="rollback"),
    "resume-check": transaction_resume_check,
    "check-now": transaction_check_now,
}
"""The console's four actions (``AuditEntry.Action`` values) -> their service, each called
with ``transaction_id``, ``reason``, ``actor``, ``via`` and ``bulk``."""

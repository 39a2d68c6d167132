"""Operator actions on a transaction: resolve it by hand, or resume its back-checks
(RocketMQ's admin ``resumeCheckHalfMessage``; the console's commit and rollback buttons).

Both run in one database transaction with the transaction row locked
(``SELECT ... FOR UPDATE``), so they serialise with producer ends, check answers and the
check scan, and both leave evidence in the logs the derived state is rebuilt from
(``broker.services.recovery``):

- a resolution writes the same ``Resolution`` journal row (and so, later, the same Op
  message) as a producer's end, plus a ``TransactionEvent`` of kind ``resolved`` with the
  operator's reason: the audit trail;
- a resume re-appends the half message to its half queue and writes a ``TransactionEvent`` of
  kind ``resumed``, from which the check count starts again at 0.
"""

from __future__ import annotations

import logging

from django.db import transaction

from broker.conf import conf
from broker.constants import HALF_TOPIC, SYS_FLAG_TRANSACTION_PREPARED_TYPE
from broker.errors import Conflict, InvalidInput, TransactionAlreadyResolved
from broker.models import CheckRequest, Message, Transaction, TransactionEvent, now_ms
from broker.rules.states import (
    RESOLVING_ACTIONS,
    ResolvedBy,
    ResolvingAction,
    TransactionState,
    resolution_of_action,
)
from broker.services.resolution import (
    transaction_announce,
    transaction_event_record,
    transaction_resolve_locked,
)
from broker.services.storage import message_copy
from broker.services.transactions import transaction_get_locked
from broker.services.validation import action_validate

logger = logging.getLogger("halfmoon.operator")


REASON_MAX_LENGTH = 1024


def _actor_checked(actor: str) -> str:
    if not actor or not actor.strip():
        raise ValueError("actor must name who acts, e.g. 'operator:<access key name>'")
    return actor


def transaction_operator_resolve(
    *, transaction_id: str, action: ResolvingAction, reason: str, actor: str
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
            Kept in the ``Resolution`` row and in the audit event.
        actor: who acts, e.g. ``"operator:<access key name>"`` (at most 160 characters).

    Returns:
        the transaction after the resolution: ``state`` COMMITTED (with ``queue_offset`` of the
        delivered message) or ROLLED_BACK, ``resolved_by`` ``operator``, ``discard_reason``
        empty.

    Also writes ``TransactionEvent(kind="resolved", outcome="COMMIT"|"ROLLBACK", actor=actor,
    detail={"reason", "previous_state"[, "discard_reason"]})``. ``discard_reason`` is cleared:
    it describes the DISCARDED state only (the rebuild derives it empty for every resolved
    transaction); the discard stays visible in its ``discarded`` event, in this event's detail
    and in the copy on ``TRANS_CHECK_MAX_TIME_TOPIC``.

    Raises:
        InvalidInput: ``invalid_action``; ``reason_required`` (missing or blank);
            ``reason_too_long``. Checked before the transaction is looked up.
        NotFound: ``transaction_not_found``.
        TransactionAlreadyResolved: 409 ``transaction_already_resolved`` with
            ``details.state`` when it is COMMITTED or ROLLED_BACK, whoever resolved it, this
            operator included: a second resolve delivers nothing.
    """
    action_validate(action, RESOLVING_ACTIONS)
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "An operator resolution needs a reason.",
            code="reason_required",
            details={"transaction_id": transaction_id},
        )
    if len(reason) > REASON_MAX_LENGTH:
        raise InvalidInput(
            f"The reason may be at most {REASON_MAX_LENGTH} characters.",
            code="reason_too_long",
            details={"max_length": REASON_MAX_LENGTH},
        )
    actor = _actor_checked(actor)
    with transaction.atomic():
        tx = transaction_get_locked(transaction_id)
        if tx.state in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK):
            raise TransactionAlreadyResolved(transaction_id, tx.state)
        previous_state = tx.state
        detail: dict[str, str] = {"reason": reason, "previous_state": previous_state}
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


def transaction_resume_check(*, transaction_id: str, actor: str) -> Transaction:
    """Put a DISCARDED transaction back under back-check (RocketMQ ``resumeCheckHalfMessage``).

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
    previous check count, discard reason and half offsets) is where the rebuild starts
    counting ``check_times`` again. The console is told (``resumed``).

    Args:
        transaction_id: the transaction (= msg_id, UNIQ_KEY).
        actor: who acts, e.g. ``"operator:<access key name>"`` (at most 160 characters).

    Returns:
        the transaction, PREPARED.

    Raises:
        NotFound: ``transaction_not_found``.
        Conflict: 409 ``transaction_not_discarded`` with ``details.state`` when it is not
            DISCARDED.
    """
    actor = _actor_checked(actor)
    with transaction.atomic():
        tx = transaction_get_locked(transaction_id)
        if tx.state != TransactionState.DISCARDED:
            raise Conflict(
                f"Transaction {transaction_id} is {tx.state}, not DISCARDED: only a discarded "
                "transaction can be checked again.",
                code="transaction_not_discarded",
                details={"transaction_id": transaction_id, "state": tx.state},
            )
        copy = message_copy(
            Message.objects.get(pk=tx.half_commit_log_offset),
            topic=HALF_TOPIC,
            queue_id=tx.half_queue_id,
            sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
            system_queue_nums=conf.half_queue_nums,
        )
        now = now_ms()
        detail = {
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

"""The operators' audit log: every console and API operator action (``AuditEntry``,
``AuditTarget``), written by the services that act (``broker.services.transactions.operator``,
``broker.services.operations.bulk``), never by views.

A single action is audited in the same database transaction as the action itself
(``operator_action_audited``): the entry exists if and only if the action happened. A refused
action (the transaction already ended, or is in a state the action does not apply to) is
audited after the refusal, in its own database transaction, with what ended the transaction.
The action also appears in the transaction's timeline: each action writes its
``TransactionEvent`` (resolved, resumed, check_requested) whose ``detail`` carries the
``reason`` and the ``audit_entry_id``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from broker.errors import Conflict, HalfmoonError, InvalidInput, TransactionAlreadyResolved
from broker.models import AuditEntry, AuditTarget, Transaction, TransactionEvent
from broker.rules.audit import ended_by_text, iso_utc
from broker.rules.states import RESOLVED_STATES, ResolvedBy, TransactionState

REASON_MAX_LENGTH = 1024
ENDED_STATES = RESOLVED_STATES  # an operator action on these is refused

# The reason recorded for an API resume-check sent without one (api-v1 makes it optional).
NO_REASON_GIVEN = "(no reason given)"

VIA_CONSOLE = AuditEntry.Via.CONSOLE
"""The ``via`` of an action taken in the console (the console's views pass it)."""


def reason_checked(reason: str | None, *, transaction_id: str | None = None) -> str:
    """``reason`` stripped; an operator action always needs one.

    Raises:
        InvalidInput: ``reason_required`` (missing or blank), ``reason_too_long`` (over
            ``REASON_MAX_LENGTH`` = 1024 characters).
    """
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "An operator action needs a reason.",
            code="reason_required",
            details={"transaction_id": transaction_id} if transaction_id else {},
        )
    if len(reason) > REASON_MAX_LENGTH:
        raise InvalidInput(
            f"The reason may be at most {REASON_MAX_LENGTH} characters.",
            code="reason_too_long",
            details={"max_length": REASON_MAX_LENGTH},
        )
    return reason


def actor_checked(actor: str) -> str:
    """``actor`` if it names someone (``operator:<access key name>``, ``console:<username>``).

    Raises:
        ValueError: blank (a programming error, not an operator's).
    """
    if not actor or not actor.strip():
        raise ValueError("actor must name who acts, e.g. 'operator:<access key name>'")
    return actor


def transaction_ended(tx: Transaction) -> dict[str, Any]:
    """What ended ``tx`` (COMMITTED, ROLLED_BACK or DISCARDED), for a refusal: ``resolved_by``,
    ``resolved_timestamp`` (ms), ``resolved_at`` (ISO-8601 UTC), ``actor`` and ``reason`` (the
    operator's, from its ``resolved`` event; the discard reason for a discard; else empty) and
    ``ended_by``, the same as one sentence (``broker.rules.audit.ended_by_text``)."""
    actor = reason = ""
    if tx.resolved_by == ResolvedBy.OPERATOR:
        event = (
            TransactionEvent.objects.filter(
                transaction_id=tx.pk, kind=TransactionEvent.Kind.RESOLVED
            )
            .order_by("-timestamp", "-id")
            .first()
        )
        if event is not None:
            actor, reason = event.actor, str(event.detail.get("reason", ""))
    elif tx.resolved_by == ResolvedBy.DISCARD:
        reason = tx.discard_reason
    ts = tx.resolved_timestamp
    return {
        "resolved_by": tx.resolved_by,
        "resolved_timestamp": ts,
        "resolved_at": iso_utc(ts) if ts is not None else None,
        "actor": actor,
        "reason": reason,
        "ended_by": ended_by_text(
            resolved_by=tx.resolved_by, resolved_timestamp=ts, actor=actor, reason=reason
        ),
    }


def ended_refusal(tx: Transaction) -> TransactionAlreadyResolved:
    """The 409 ``transaction_already_resolved`` for an action on ``tx``, which has ended
    (COMMITTED or ROLLED_BACK): ``details`` has ``state`` and ``transaction_ended(tx)``."""
    return TransactionAlreadyResolved(tx.pk, tx.state, ended=transaction_ended(tx))


def audit_entry_record(
    *,
    action: str,
    actor: str,
    via: str,
    reason: str,
    state: str,
    result: str,
    targets: Mapping[str | int, tuple[str, dict[str, Any]]],
    scope: dict[str, Any] | None = None,
) -> AuditEntry:
    """Append an ``AuditEntry`` and its ``AuditTarget`` rows.

    Args:
        action: an ``AuditEntry.Action``; ``via``: an ``AuditEntry.Via``; ``state``: an
            ``AuditEntry.State``; ``result``: the summary (cut to 512 characters).
        targets: ``{transaction_id: (AuditTarget.Result, detail)}``; a dead letter's key is
            the commit log offset of its DLQ copy, an int (``AuditTarget.commit_log_offset``).
        scope: what the action was asked for (a bulk's selection or filter).

    Returns:
        the entry; ``total`` is the number of targets, ``processed`` those not pending.
    """
    pending = AuditTarget.Result.PENDING
    entry = AuditEntry.objects.create(
        actor=actor,
        via=via,
        action=action,
        reason=reason,
        state=state,
        result=result[:512],
        scope=scope or {},
        total=len(targets),
        processed=sum(1 for result, _ in targets.values() if result != pending),
    )
    AuditTarget.objects.bulk_create(
        [
            AuditTarget(entry=entry, result=result, detail=detail, **_target_key(key))
            for key, (result, detail) in targets.items()
        ],
        batch_size=1000,
    )
    return entry


def _target_key(key: str | int) -> dict[str, Any]:
    if isinstance(key, int):
        return {"commit_log_offset": key}
    return {"transaction_id": key}


def operator_action_audited(
    *,
    action: str,
    transaction_id: str,
    actor: str,
    via: str,
    reason: str,
    bulk: AuditEntry | None,
    done: str,
    apply: Callable[[dict[str, Any]], Transaction],
) -> Transaction:
    """Run one operator action on one transaction with its audit.

    ``apply(audit)`` does the action inside this function's database transaction and puts
    ``audit`` (``{"reason", "via", "audit_entry_id"}``) in the detail of the
    ``TransactionEvent`` it writes, so the timeline names the audit entry.

    Without ``bulk`` a single-action ``AuditEntry`` (``state`` done, ``result`` ``done``, one
    ``done`` target) is written first in the same database transaction, so the action and its
    entry commit together; a ``HalfmoonError`` from ``apply`` rolls both back and is audited
    afterwards as ``refused`` (target ``already_ended`` when the transaction had ended, else
    ``failed``, with the error's details), then raised again. With ``bulk`` (a bulk's entry)
    nothing is written here: the bulk records the target's result (``broker.services.operations.bulk``).

    Returns:
        what ``apply`` returned. Raises what ``apply`` raised.
    """
    if bulk is not None:
        with transaction.atomic():
            return apply({"reason": reason, "via": via, "audit_entry_id": bulk.pk})
    try:
        with transaction.atomic():
            entry = audit_entry_record(
                action=action,
                actor=actor,
                via=via,
                reason=reason,
                state=AuditEntry.State.DONE,
                result=done,
                targets={transaction_id: (AuditTarget.Result.DONE, {"state": ""})},
            )
            tx = apply({"reason": reason, "via": via, "audit_entry_id": entry.pk})
            AuditTarget.objects.filter(entry=entry).update(detail={"state": tx.state})
            return tx
    except HalfmoonError as exc:
        with transaction.atomic():
            audit_entry_record(
                action=action,
                actor=actor,
                via=via,
                reason=reason,
                state=AuditEntry.State.REFUSED,
                result=exc.message,
                targets={transaction_id: (refusal_result(exc), refusal_detail(exc))},
            )
        raise


def refusal_result(exc: BaseException) -> str:
    """The ``AuditTarget.Result`` of an action refused with ``exc``: ``already_ended`` when the
    transaction had ended (``TransactionAlreadyResolved``, or a refusal whose details carry
    ``resolved_by`` of a COMMITTED or ROLLED_BACK transaction), else ``failed``."""
    details = getattr(exc, "details", {}) or {}
    if isinstance(exc, TransactionAlreadyResolved) or details.get("state") in ENDED_STATES:
        return AuditTarget.Result.ALREADY_ENDED
    return AuditTarget.Result.FAILED


def refusal_detail(exc: BaseException) -> dict[str, Any]:
    """A refused or failed target's ``detail``: the error's ``code``, ``message`` and
    details (for an unexpected exception, its class and text)."""
    if isinstance(exc, HalfmoonError):
        return {"code": exc.code, "error": exc.message, **exc.details}
    return {"code": "internal_error", "error": f"{type(exc).__name__}: {exc}"[:500]}


def state_refusal(tx: Transaction, wanted: str, code: str) -> Conflict:
    """409 ``code`` for an action that needs state ``wanted`` on ``tx``: ``details.state``,
    and what ended it when it has ended or been discarded."""
    details: dict[str, Any] = {"transaction_id": tx.pk, "state": tx.state}
    message = f"Transaction {tx.pk} is {tx.state}, not {wanted}"
    if tx.state != TransactionState.PREPARED:
        ended = transaction_ended(tx)
        details.update(ended)
        message += f": ended by {ended['ended_by']}"
    return Conflict(message + ".", code=code, details=details)

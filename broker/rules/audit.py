"""Pure rules of the operators' audit log: how a time and "what ended a transaction" are said
to an operator. No database."""

from __future__ import annotations

from datetime import UTC, datetime

from broker.rules.states import ResolvedBy

# How each ``ResolvedBy`` reads after "already COMMITTED by ...".
_ENDED_BY = {
    ResolvedBy.PRODUCER: "its producer",
    ResolvedBy.CHECK: "a back-check answer",
    ResolvedBy.OPERATOR: "an operator",
    ResolvedBy.DISCARD: "the check scan (discard)",
}


def iso_utc(timestamp_ms: int) -> str:
    """``timestamp_ms`` (ms since the epoch) as ISO-8601 UTC with milliseconds, e.g.
    ``2026-11-23T11:53:02.120Z``."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ended_by_text(
    *,
    resolved_by: str | None,
    resolved_timestamp: int | None,
    actor: str = "",
    reason: str = "",
) -> str:
    """Who ended a transaction and when, for a refusal message: ``"its producer at
    2026-11-23T11:53:02.120Z"``, ``"operator console:alice (reason: ticket 7) at ..."``,
    ``"the check scan (discard: check_max) at ..."``.

    Args:
        resolved_by: a ``ResolvedBy`` value (producer, check, operator, discard) or None.
        resolved_timestamp: when (ms), or None.
        actor: the operator (``operator:<key>`` / ``console:<user>``) when ``resolved_by`` is
            operator; ignored otherwise.
        reason: the operator's reason, or the discard reason.
    """
    if resolved_by == ResolvedBy.DISCARD and reason:
        who = f"the check scan (discard: {reason})"
    elif resolved_by == ResolvedBy.OPERATOR and actor:
        who = f"operator {actor}" + (f" (reason: {reason})" if reason else "")
    else:
        who = _ENDED_BY.get(resolved_by or "", resolved_by or "unknown")
    if resolved_timestamp is not None:
        who = f"{who} at {iso_utc(resolved_timestamp)}"
    return who

"""Bulk operator actions over a frozen set of transactions (the console's "bulk commit /
rollback / resume checks" on a selection or on the stuck list's filter), each audited in one
``AuditEntry`` (``action`` ``bulk-*``) run as a frozen set (``broker.services.operations.
frozen_sets``):

1. ``bulk_preview_selection`` / ``bulk_preview_filter`` (dry run): the transactions the action
   would change *now* are frozen as the entry's ``pending`` targets (at most
   ``BULK_MAX_TARGETS``); a scoped operator's (``allowed_producer_groups``) leave the other
   groups' out, and ``scope.excluded`` says how many, of which groups.
2. ``bulk_apply``: ``queued``, and ``tasks.operations.bulk_action_run`` is sent.
3. ``bulk_run`` (the task): each pending transaction through the single action's service
   (``broker.services.transactions.operator``); the filter is never queried again.

See docs/design.md, "Operator actions" (bulk actions, frozen sets).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from django.db.models import Count, QuerySet

from broker.errors import Forbidden, InvalidInput
from broker.models import AuditEntry, AuditTarget, Transaction
from broker.rules.clock import now_ms
from broker.rules.states import TransactionState
from broker.selectors.audit import bulk_get
from broker.selectors.grants import bulk_target_producer_groups
from broker.selectors.transactions import stuck_transactions
from broker.services.operations.audit import (
    actor_checked,
    reason_checked,
    refusal_detail,
    refusal_result,
)
from broker.services.operations.frozen_sets import (
    FrozenSetKind,
    frozen_set_apply,
    frozen_set_freeze,
    frozen_set_run,
)
from broker.services.transactions.operator import OPERATOR_ACTIONS

logger = logging.getLogger("halfmoon.bulk")

BULK_MAX_TARGETS = 10_000
BULK_RUN_TASK = "tasks.operations.bulk_action_run"
BULK_SET = FrozenSetKind(noun="Bulk action", code="bulk", id_key="bulk_id", task=BULK_RUN_TASK)
EXCLUDED_IDS_KEPT = 100  # a selection's left-out transaction ids kept in the entry's scope

Result = AuditTarget.Result

# action -> (the bulk's AuditEntry.Action, the states it applies to); the per-transaction
# service is broker.services.transactions.operator.OPERATOR_ACTIONS[action].
BULK_ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "commit": (
        AuditEntry.Action.BULK_COMMIT,
        (TransactionState.PREPARED, TransactionState.DISCARDED),
    ),
    "rollback": (
        AuditEntry.Action.BULK_ROLLBACK,
        (TransactionState.PREPARED, TransactionState.DISCARDED),
    ),
    "resume-check": (AuditEntry.Action.BULK_RESUME_CHECK, (TransactionState.DISCARDED,)),
}
ACTION_OF_BULK_ENTRY = {entry_action: key for key, (entry_action, _) in BULK_ACTIONS.items()}
"""A bulk's ``AuditEntry.Action`` -> its action."""


def bulk_action_states(action: str) -> tuple[str, ...]:
    """The states a bulk ``action`` (commit, rollback, resume-check) changes.

    Raises:
        InvalidInput: ``invalid_action``.
    """
    if action not in BULK_ACTIONS:
        raise InvalidInput(
            f"A bulk action is one of {', '.join(BULK_ACTIONS)}.",
            code="invalid_action",
            details={"action": action},
        )
    return BULK_ACTIONS[action][1]


def bulk_preview_selection(
    *,
    action: str,
    reason: str | None,
    actor: str,
    via: str,
    transaction_ids: Sequence[str],
    allowed_producer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Freeze the selected transactions that ``action`` would change (see ``_preview``).

    ``scope``: ``{"kind": "selection", "selected": n, "skipped": [ids whose state does not
    allow the action or that do not exist, first 100]}``, and for a scoped operator
    ``operator_producer_groups`` and ``excluded`` (see ``_preview``) whose ``transaction_ids``
    lists the first ``EXCLUDED_IDS_KEPT`` selected ids left out (not in ``skipped``).
    """
    ids = list(dict.fromkeys(t for t in transaction_ids if t))
    if len(ids) > BULK_MAX_TARGETS:
        raise _too_many(len(ids))
    candidates = Transaction.objects.filter(pk__in=ids).order_by(
        "born_timestamp", "half_commit_log_offset"
    )
    scope: dict[str, Any] = {"kind": "selection", "selected": len(ids)}

    def skipped(frozen: set[str], excluded: set[str]) -> None:
        scope["skipped"] = [t for t in ids if t not in frozen and t not in excluded][:100]
        if "excluded" in scope:
            kept = [t for t in ids if t in excluded][:EXCLUDED_IDS_KEPT]
            scope["excluded"]["transaction_ids"] = kept

    return _preview(action, reason, actor, via, candidates, scope, skipped, allowed_producer_groups)


def bulk_preview_filter(
    *,
    action: str,
    reason: str | None,
    actor: str,
    via: str,
    filters: dict[str, Any],
    allowed_producer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Freeze the transactions of the stuck list's filter that ``action`` would change.

    ``filters``: the keyword arguments of ``broker.selectors.transactions.stuck_transactions``
    (``console.forms.transactions.filters_from_form``); ``now`` is fixed at the preview. ``scope``:
    ``{"kind": "filter", "filters": {...}}``, and for a scoped operator
    ``operator_producer_groups`` and ``excluded`` (see ``_preview``).
    """
    filters = {**filters, "now": filters.get("now") or now_ms()}
    scope = {"kind": "filter", "filters": filters}
    candidates = stuck_transactions(**filters)
    return _preview(action, reason, actor, via, candidates, scope, None, allowed_producer_groups)


def _preview(
    action: str,
    reason: str | None,
    actor: str,
    via: str,
    candidates: QuerySet[Transaction],
    scope: dict[str, Any],
    on_frozen: Callable[[set[str], set[str]], None] | None,
    allowed_producer_groups: Collection[str] | None,
) -> AuditEntry:
    """The dry run: the candidates whose state allows ``action``, in their order, as the
    pending targets of a new ``previewed`` bulk entry (each target's ``detail.preview_state``:
    its state at the preview, kept when the result is recorded).

    ``allowed_producer_groups``: None for a full operator; for an operator scoped to producer
    groups (``broker.rules.grants.OperatorScope.producer_groups``), those groups: the
    candidates of other groups are left out, and ``scope`` records
    ``operator_producer_groups`` (sorted) and ``excluded`` = ``{"count": n,
    "producer_groups": [{"producer_group": g, "count": n}, ...]}`` (by name; ``count`` 0 when
    nothing was left out). ``on_frozen(frozen ids, left-out ids)`` is called before the entry
    is written (the left-out ids only when ``allowed_producer_groups`` is given).

    Raises:
        InvalidInput: ``invalid_action``, ``reason_required``, ``reason_too_long``;
            ``bulk_empty`` (nothing would change); ``bulk_too_large`` (over
            ``BULK_MAX_TARGETS``: narrow the filter).
        Forbidden: ``bulk_outside_scope``: something would change, but only in producer
            groups the operator may not operate (``details.excluded``).
    """
    states = bulk_action_states(action)
    entry_action = BULK_ACTIONS[action][0]
    reason = reason_checked(reason)
    actor = actor_checked(actor)
    allowed = candidates.filter(state__in=states)
    excluded_ids: set[str] = set()
    if allowed_producer_groups is not None:
        groups = sorted(set(allowed_producer_groups))
        outside = allowed.exclude(producer_group__in=groups)
        scope["operator_producer_groups"] = groups
        scope["excluded"] = _excluded(outside)
        if scope["excluded"]["count"] and on_frozen is not None:
            excluded_ids = set(outside.values_list("transaction_id", flat=True))
        allowed = allowed.filter(producer_group__in=groups)
    rows = list(allowed.values_list("transaction_id", "state")[: BULK_MAX_TARGETS + 1])
    if len(rows) > BULK_MAX_TARGETS:
        raise _too_many(allowed.count())
    excluded_count = scope.get("excluded", {}).get("count", 0)
    if not rows and excluded_count:
        raise Forbidden(
            f"Every transaction {action} would change here is of a producer group you may not "
            f"operate: {excluded_text(scope['excluded'])} left out; you operate "
            f"{', '.join(scope['operator_producer_groups']) or 'no producer group'}.",
            code="bulk_outside_scope",
            details={"action": action, "excluded": scope["excluded"]},
        )
    if not rows:
        raise InvalidInput(
            f"No transaction in this scope can be changed by {action} "
            f"(it applies to {' and '.join(states)} ones).",
            code="bulk_empty",
            details={"action": action},
        )
    if on_frozen is not None:
        on_frozen({tid for tid, _ in rows}, excluded_ids)
    result = f"previewed: {len(rows)} transactions to {action}"
    if excluded_count:
        result += f"; left out: {excluded_text(scope['excluded'])}"
    entry = frozen_set_freeze(
        action=entry_action,
        actor=actor,
        via=via,
        reason=reason,
        result=result,
        targets={tid: {"preview_state": state} for tid, state in rows},
        scope=scope,
    )
    logger.info("%s previewed bulk #%d: %s %d transactions", actor, entry.pk, action, len(rows))
    return entry


def _excluded(outside: QuerySet[Transaction]) -> dict[str, Any]:
    """What a scoped preview leaves out: ``{"count": n, "producer_groups": [{"producer_group":
    g, "count": n}, ...]}`` by group name. One ``GROUP BY`` query."""
    by_group = [
        {"producer_group": row["producer_group"], "count": row["n"]}
        for row in outside.order_by()
        .values("producer_group")
        .annotate(n=Count("pk"))
        .order_by("producer_group")
    ]
    return {"count": sum(g["count"] for g in by_group), "producer_groups": by_group}


def excluded_text(excluded: dict[str, Any]) -> str:
    """A bulk's ``scope.excluded`` in words: "3 transactions of producer groups a (2), b (1)"."""
    groups = excluded.get("producer_groups") or []
    noun = "producer group" if len(groups) == 1 else "producer groups"
    listed = ", ".join(f"{g['producer_group']} ({g['count']})" for g in groups)
    n = excluded.get("count", 0)
    return f"{n} transaction{'' if n == 1 else 's'} of {noun} {listed}"


def _too_many(n: int) -> InvalidInput:
    return InvalidInput(
        f"{n} transactions match; a bulk action takes at most {BULK_MAX_TARGETS}: narrow the "
        "filter or the selection.",
        code="bulk_too_large",
        details={"count": n, "max": BULK_MAX_TARGETS},
    )


def bulk_apply(
    *, bulk_id: int, actor: str, allowed_producer_groups: Collection[str] | None = None
) -> AuditEntry:
    """Confirm a previewed bulk: ``queued`` (``applied_by`` = ``actor``, ``applied_timestamp``)
    and, once this commits, send the task ``tasks.operations.bulk_action_run``. Confirming a bulk
    that is already queued or running sends the task again (a resume after a worker died:
    done targets are skipped); the first confirmation's ``applied_by`` stays.

    ``allowed_producer_groups``: None for a full operator; for a scoped one, its producer
    groups, which must hold every target's (``broker.selectors.grants.
    bulk_target_producer_groups``): a scoped operator confirms its own previews, or another's
    that stayed within its groups. The rights are checked here, at the confirmation; the run
    does not check them again.

    Returns:
        the entry.

    Raises:
        NotFound: ``bulk_not_found``.
        Conflict: ``bulk_done`` when it has finished.
        Forbidden: ``bulk_outside_scope`` (``details.producer_groups``: the targets' groups the
            operator may not operate).
    """
    actor = actor_checked(actor)
    if allowed_producer_groups is not None:
        outside = sorted(
            bulk_target_producer_groups(bulk_get(bulk_id).pk) - set(allowed_producer_groups)
        )
        if outside:
            raise Forbidden(
                f"Bulk action {bulk_id} acts on producer groups you may not operate: "
                f"{', '.join(outside)}.",
                code="bulk_outside_scope",
                details={"bulk_id": bulk_id, "producer_groups": outside},
            )
    entry = frozen_set_apply(bulk_get(bulk_id).pk, BULK_SET, actor=actor)
    logger.info("%s applied bulk #%d (%s)", actor, bulk_id, entry.action)
    return entry


def bulk_run(bulk_id: int) -> AuditEntry:
    """Apply a queued (or interrupted running) bulk to its pending targets
    (``frozen_set_run``): each transaction through the single action's service, written as by
    ``applied_by`` with the bulk's reason, its events naming the bulk's entry; a target's
    result is ``done``, ``already_ended`` (with what ended it) or ``failed`` (the error).

    Returns:
        the entry, ``done`` with ``counts`` ``{done, already_ended, failed}`` and ``result``
        their summary.

    Raises:
        NotFound: ``bulk_not_found``. Conflict: ``bulk_not_applied`` (still previewed).
    """
    return frozen_set_run(bulk_get(bulk_id).pk, BULK_SET, _target_act)


def _target_act(entry: AuditEntry, target: AuditTarget) -> tuple[str, dict[str, Any]]:
    """The bulk's action on one target's transaction (a ``TargetAction``)."""
    service = OPERATOR_ACTIONS[ACTION_OF_BULK_ENTRY[entry.action]]
    try:
        tx = service(
            transaction_id=target.transaction_id,
            reason=entry.reason,
            actor=entry.applied_by or entry.actor,
            via=entry.via,
            bulk=entry,
        )
    except Exception as exc:  # noqa: BLE001 - recorded as the target's result
        return refusal_result(exc), refusal_detail(exc)
    return Result.DONE, {"state": tx.state}

"""Bulk operator actions over a frozen set of transactions (the console's "bulk commit /
rollback / resume checks" on a selection or on the stuck list's filter).

Three steps, each audited in one ``AuditEntry`` (``action`` ``bulk-*``):

1. ``bulk_preview_selection`` / ``bulk_preview_filter`` (dry run): the transactions the action
   would change *now* (those whose state allows it) are frozen as the entry's ``AuditTarget``
   rows (``pending``), at most ``BULK_MAX_TARGETS``; the entry is ``previewed``. The operator
   sees exactly that count and list. An operator scoped to producer groups
   (``broker.rules.grants``) passes ``allowed_producer_groups``: the transactions of other
   groups are left out of the frozen set, and the entry's ``scope.excluded`` says how many,
   of which groups.
2. ``bulk_apply``: ``queued``, and the Celery task ``tasks.operations.bulk_action_run`` is sent.
   A scoped operator may confirm only a bulk whose every target is of its producer groups.
3. ``bulk_run`` (the task): ``running``; applies the action to the pending targets only, one
   transaction at a time, each in its own database transaction through the same services as a
   single action (``broker.services.transactions.operator``), and records each target's result (``done``,
   ``already_ended`` with what ended it, ``failed`` with the error) in that same database
   transaction: a target that is done is never acted on again, so a run cut short (the worker
   died) is resumed by running it again. The filter is never queried again: a transaction
   that arrives after the preview is not touched. Progress is published
   (``broker.plumbing.events.bulk_action_progress_publish``) at most every ``PROGRESS_INTERVAL_MS`` and
   at the end (``done``).

The entry's progress fields are the only ones that change after the preview (see
``AuditEntry``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import Count, QuerySet

from broker.errors import Conflict, Forbidden, InvalidInput
from broker.models import AuditEntry, AuditTarget, Transaction, now_ms
from broker.plumbing.events import BulkActionProgress, bulk_action_progress_publish
from broker.rules.states import TransactionState
from broker.selectors.audit import bulk_get
from broker.selectors.grants import bulk_target_producer_groups
from broker.selectors.transactions import stuck_transactions
from broker.services.operations.audit import (
    actor_checked,
    audit_entry_record,
    reason_checked,
    refusal_detail,
    refusal_result,
)
from broker.services.transactions.operator import OPERATOR_ACTIONS

logger = logging.getLogger("halfmoon.bulk")

BULK_MAX_TARGETS = 10_000
PROGRESS_INTERVAL_MS = 100  # at most ~10 progress announcements a second
BULK_RUN_TASK = "tasks.operations.bulk_action_run"
_CHUNK = 200
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
    with transaction.atomic():
        entry = audit_entry_record(
            action=entry_action,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.PREVIEWED,
            result=result,
            targets={tid: (Result.PENDING, {"preview_state": state}) for tid, state in rows},
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
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=bulk_get(bulk_id).pk)
        if entry.state == AuditEntry.State.DONE:
            raise Conflict(
                f"Bulk action {bulk_id} has finished: {entry.result}.",
                code="bulk_done",
                details={"bulk_id": bulk_id},
            )
        if entry.state == AuditEntry.State.PREVIEWED:
            entry.state = AuditEntry.State.QUEUED
            entry.applied_by = actor
            entry.applied_timestamp = now_ms()
            entry.save(update_fields=["state", "applied_by", "applied_timestamp"])
        transaction.on_commit(lambda: current_app.send_task(BULK_RUN_TASK, args=[bulk_id]))
    logger.info("%s applied bulk #%d (%s)", actor, bulk_id, entry.action)
    return entry


def bulk_run(bulk_id: int) -> AuditEntry:
    """Apply a queued (or interrupted running) bulk to its pending targets; see the module
    docstring. Safe to run again, or twice at once (each target is locked, ``SKIP LOCKED``,
    and acted on only while pending). The per-transaction actions are written as by
    ``applied_by`` with the bulk's reason, their events naming the bulk's entry.

    Returns:
        the entry, ``done`` with ``counts`` ``{done, already_ended, failed}`` and ``result``
        their summary.

    Raises:
        NotFound: ``bulk_not_found``. Conflict: ``bulk_not_applied`` (still previewed).
    """
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=bulk_get(bulk_id).pk)
        if entry.state == AuditEntry.State.DONE:
            return entry
        if entry.state == AuditEntry.State.PREVIEWED:
            raise Conflict(
                f"Bulk action {bulk_id} was previewed, not applied.",
                code="bulk_not_applied",
                details={"bulk_id": bulk_id},
            )
        entry.state = AuditEntry.State.RUNNING
        entry.save(update_fields=["state"])
    progress = TargetProgress(entry)
    last_id = 0
    while batch := list(
        entry.targets.filter(result=Result.PENDING, id__gt=last_id)
        .order_by("id")
        .values_list("id", "transaction_id")[:_CHUNK]
    ):
        for target_id, transaction_id in batch:
            last_id = target_id
            result = _target_apply(entry, target_id, transaction_id)
            if result is not None:
                progress.add(result)
    return progress.finish()


def _target_apply(entry: AuditEntry, target_id: int, transaction_id: str) -> str | None:
    """Act on one pending target in one database transaction with its result; None when it is
    not pending any more (another run took it)."""
    service = OPERATOR_ACTIONS[ACTION_OF_BULK_ENTRY[entry.action]]
    with transaction.atomic():
        target = (
            AuditTarget.objects.select_for_update(skip_locked=True)
            .filter(pk=target_id, result=Result.PENDING)
            .first()
        )
        if target is None:
            return None
        try:
            tx = service(
                transaction_id=transaction_id,
                reason=entry.reason,
                actor=entry.applied_by or entry.actor,
                via=entry.via,
                bulk=entry,
            )
            target.result, target.detail = Result.DONE, {**target.detail, "state": tx.state}
        except Exception as exc:  # noqa: BLE001 - recorded as the target's result
            target.result = refusal_result(exc)
            target.detail = {**target.detail, **refusal_detail(exc)}
        target.save(update_fields=["result", "detail"])
    return target.result


def bulk_counts(entry: AuditEntry) -> dict[str, int]:
    """The entry's targets counted by result: ``{done, already_ended, failed}`` (and
    ``pending``)."""
    counts = dict.fromkeys(Result.values, 0)
    for row in entry.targets.values("result").annotate(n=Count("id")):
        counts[row["result"]] = row["n"]
    return counts


class TargetProgress:
    """Counts of one run over an entry's frozen targets, saved on the entry and announced
    (``bulk.progress``, ``bulk_id`` = the entry's id) at most every ``PROGRESS_INTERVAL_MS``
    and at the end. Also used by the dead-letter resend sets
    (``broker.services.consumption.group_ops``), whose page listens the same way."""

    def __init__(self, entry: AuditEntry) -> None:
        self.entry = entry
        self.counts = bulk_counts(entry)
        self.last = 0
        self._publish()

    def add(self, result: str) -> None:
        self.counts[result] += 1
        self.counts[Result.PENDING] -= 1
        if now_ms() - self.last >= PROGRESS_INTERVAL_MS:
            self._publish()

    def finish(self) -> AuditEntry:
        entry = self.entry
        self.counts = bulk_counts(entry)
        entry.state = AuditEntry.State.DONE
        entry.finished_timestamp = now_ms()
        entry.result = ", ".join(
            f"{self.counts[r]} {r.replace('_', ' ')}"
            for r in (Result.DONE, Result.ALREADY_ENDED, Result.FAILED)
        )
        self._publish()
        logger.info("bulk #%d done: %s", entry.pk, entry.result)
        return entry

    def _publish(self) -> None:
        entry = self.entry
        entry.counts = {
            r: self.counts[r] for r in (Result.DONE, Result.ALREADY_ENDED, Result.FAILED)
        }
        entry.processed = entry.total - self.counts[Result.PENDING]
        fields = ["counts", "processed", "state", "result", "finished_timestamp"]
        AuditEntry.objects.filter(pk=entry.pk).update(**{f: getattr(entry, f) for f in fields})
        self.last = now_ms()
        bulk_action_progress_publish(
            BulkActionProgress(
                type="bulk.progress",
                bulk_id=entry.pk,
                action=entry.action,
                state="done" if entry.state == AuditEntry.State.DONE else "running",
                total=entry.total,
                processed=entry.processed,
                counts=dict(entry.counts),
                timestamp=self.last,
            )
        )

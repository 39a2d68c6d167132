"""Bulk operator actions over a frozen set of transactions (the console's "bulk commit /
rollback / resume checks" on a selection or on the stuck list's filter).

Three steps, each audited in one ``AuditEntry`` (``action`` ``bulk-*``):

1. ``bulk_preview_selection`` / ``bulk_preview_filter`` (dry run): the transactions the action
   would change *now* (those whose state allows it) are frozen as the entry's ``AuditTarget``
   rows (``pending``), at most ``BULK_MAX_TARGETS``; the entry is ``previewed``. The operator
   sees exactly that count and list.
2. ``bulk_apply``: ``queued``, and the Celery task ``tasks.console.bulk_action_run`` is sent.
3. ``bulk_run`` (the task): ``running``; applies the action to the pending targets only, one
   transaction at a time, each in its own database transaction through the same services as a
   single action (``broker.services.operator``), and records each target's result (``done``,
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
from collections.abc import Callable, Sequence
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import Count, QuerySet

from broker.errors import Conflict, InvalidInput
from broker.models import AuditEntry, AuditTarget, Transaction, now_ms
from broker.plumbing.events import BulkActionProgress, bulk_action_progress_publish
from broker.rules.states import TransactionState
from broker.selectors.audit import bulk_get
from broker.selectors.transactions import stuck_transactions
from broker.services.audit import (
    actor_checked,
    audit_entry_record,
    reason_checked,
    refusal_detail,
    refusal_result,
)
from broker.services.operator import OPERATOR_ACTIONS

logger = logging.getLogger("halfmoon.bulk")

BULK_MAX_TARGETS = 10_000
PROGRESS_INTERVAL_MS = 100  # at most ~10 progress announcements a second
BULK_RUN_TASK = "tasks.console.bulk_action_run"
_CHUNK = 200

Result = AuditTarget.Result

# action -> (the bulk's AuditEntry.Action, the states it applies to); the per-transaction
# service is broker.services.operator.OPERATOR_ACTIONS[action].
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
    *, action: str, reason: str | None, actor: str, via: str, transaction_ids: Sequence[str]
) -> AuditEntry:
    """Freeze the selected transactions that ``action`` would change (see ``_preview``).

    ``scope``: ``{"kind": "selection", "selected": n, "skipped": [ids whose state does not
    allow the action or that do not exist, first 100]}``.
    """
    ids = list(dict.fromkeys(t for t in transaction_ids if t))
    if len(ids) > BULK_MAX_TARGETS:
        raise _too_many(len(ids))
    candidates = Transaction.objects.filter(pk__in=ids).order_by(
        "born_timestamp", "half_commit_log_offset"
    )
    scope: dict[str, Any] = {"kind": "selection", "selected": len(ids)}

    def skipped(frozen: set[str]) -> None:
        scope["skipped"] = [t for t in ids if t not in frozen][:100]

    return _preview(action, reason, actor, via, candidates, scope, skipped)


def bulk_preview_filter(
    *, action: str, reason: str | None, actor: str, via: str, filters: dict[str, Any]
) -> AuditEntry:
    """Freeze the transactions of the stuck list's filter that ``action`` would change.

    ``filters``: the keyword arguments of ``broker.selectors.transactions.stuck_transactions``
    (``console.forms.transactions.filters_from_form``); ``now`` is fixed at the preview. ``scope``:
    ``{"kind": "filter", "filters": {...}}``.
    """
    filters = {**filters, "now": filters.get("now") or now_ms()}
    scope = {"kind": "filter", "filters": filters}
    return _preview(action, reason, actor, via, stuck_transactions(**filters), scope, None)


def _preview(
    action: str,
    reason: str | None,
    actor: str,
    via: str,
    candidates: QuerySet[Transaction],
    scope: dict[str, Any],
    on_frozen: Callable[[set[str]], None] | None,
) -> AuditEntry:
    """The dry run: the candidates whose state allows ``action``, in their order, as the
    pending targets of a new ``previewed`` bulk entry (each target's ``detail.preview_state``:
    its state at the preview, kept when the result is recorded).

    Raises:
        InvalidInput: ``invalid_action``, ``reason_required``, ``reason_too_long``;
            ``bulk_empty`` (nothing would change); ``bulk_too_large`` (over
            ``BULK_MAX_TARGETS``: narrow the filter).
    """
    states = bulk_action_states(action)
    entry_action = BULK_ACTIONS[action][0]
    reason = reason_checked(reason)
    actor = actor_checked(actor)
    allowed = candidates.filter(state__in=states)
    rows = list(allowed.values_list("transaction_id", "state")[: BULK_MAX_TARGETS + 1])
    if len(rows) > BULK_MAX_TARGETS:
        raise _too_many(allowed.count())
    if not rows:
        raise InvalidInput(
            f"No transaction in this scope can be changed by {action} "
            f"(it applies to {' and '.join(states)} ones).",
            code="bulk_empty",
            details={"action": action},
        )
    if on_frozen is not None:
        on_frozen({tid for tid, _ in rows})
    with transaction.atomic():
        entry = audit_entry_record(
            action=entry_action,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.PREVIEWED,
            result=f"previewed: {len(rows)} transactions to {action}",
            targets={tid: (Result.PENDING, {"preview_state": state}) for tid, state in rows},
            scope=scope,
        )
    logger.info("%s previewed bulk #%d: %s %d transactions", actor, entry.pk, action, len(rows))
    return entry


def _too_many(n: int) -> InvalidInput:
    return InvalidInput(
        f"{n} transactions match; a bulk action takes at most {BULK_MAX_TARGETS}: narrow the "
        "filter or the selection.",
        code="bulk_too_large",
        details={"count": n, "max": BULK_MAX_TARGETS},
    )


def bulk_apply(*, bulk_id: int, actor: str) -> AuditEntry:
    """Confirm a previewed bulk: ``queued`` (``applied_by`` = ``actor``, ``applied_timestamp``)
    and, once this commits, send the task ``tasks.console.bulk_action_run``. Confirming a bulk
    that is already queued or running sends the task again (a resume after a worker died:
    done targets are skipped); the first confirmation's ``applied_by`` stays.

    Returns:
        the entry.

    Raises:
        NotFound: ``bulk_not_found``.
        Conflict: ``bulk_done`` when it has finished.
    """
    actor = actor_checked(actor)
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
    progress = _Progress(entry)
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


class _Progress:
    """Counts of one run, saved on the entry and announced at most every
    ``PROGRESS_INTERVAL_MS`` and at the end."""

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

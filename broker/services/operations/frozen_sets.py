"""Frozen sets of targets, previewed, confirmed, then run by a worker with live progress: the
bulk actions (``broker.services.operations.bulk``) and the dead-letter resend sets
(``broker.services.consumption.dead_letters``). Each of those says only what one target's
action is (a ``TargetAction``); the steps are here:

1. ``frozen_set_freeze``: a ``previewed`` ``AuditEntry`` whose ``pending`` ``AuditTarget`` rows
   are exactly what the set will act on.
2. ``frozen_set_apply``: ``queued``, and the set's Celery task is sent once this commits.
3. ``frozen_set_run`` (the task): ``running``; each pending target in its own database
   transaction holding its row (``SKIP LOCKED``, only while ``pending``) with its outcome; a
   run cut short is resumed by running it again. Progress (``TargetProgress``) is published
   as ``bulk.progress`` at most every ``PROGRESS_INTERVAL_MS`` and at the end (``done``).

See docs/design.md, "Operator actions" (frozen sets).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import Count

from broker.errors import Conflict
from broker.models import AuditEntry, AuditTarget
from broker.plumbing.events import BulkActionProgress, bulk_action_progress_publish
from broker.rules.clock import now_ms
from broker.services.operations.audit import audit_entry_record

logger = logging.getLogger("halfmoon.frozen_sets")

PROGRESS_INTERVAL_MS = 100  # at most ~10 progress announcements a second
CHUNK = 200  # pending target ids read at a time

Result = AuditTarget.Result
OUTCOMES = (Result.DONE, Result.ALREADY_ENDED, Result.FAILED)

TargetAction = Callable[[AuditEntry, AuditTarget], tuple[str, dict[str, Any]]]
"""One pending target's action, called inside the database transaction holding its row:
returns its ``AuditTarget.Result`` and what to add to its ``detail``. An exception it raises
rolls that target back (still ``pending``) and ends the run."""


@dataclass(frozen=True)
class FrozenSetKind:
    """What one kind of frozen set is called: ``noun`` in its errors' messages ("Bulk
    action"), ``code`` the prefix of their codes (``<code>_done``, ``<code>_not_applied``),
    ``id_key`` the entry id's key in their ``details``, ``task`` the Celery task that runs it
    (sent with the entry's id)."""

    noun: str
    code: str
    id_key: str
    task: str

    def conflict(self, entry_id: int, what: str, code: str) -> Conflict:
        return Conflict(
            f"{self.noun} {entry_id} {what}.",
            code=f"{self.code}_{code}",
            details={self.id_key: entry_id},
        )


def frozen_set_freeze(
    *,
    action: str,
    actor: str,
    via: str,
    reason: str,
    result: str,
    targets: Mapping[str | int, dict[str, Any]],
    scope: dict[str, Any],
) -> AuditEntry:
    """Write a ``previewed`` entry of ``action`` with ``targets`` (``{transaction id or dead
    letter's commit log offset: detail}``, in the order they will be run) as ``pending``
    targets, in one database transaction (``audit_entry_record``)."""
    with transaction.atomic():
        return audit_entry_record(
            action=action,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.PREVIEWED,
            result=result,
            targets={key: (Result.PENDING, detail) for key, detail in targets.items()},
            scope=scope,
        )


def frozen_set_apply(
    entry_id: int, kind: FrozenSetKind, *, actor: str, reason: str | None = None
) -> AuditEntry:
    """Confirm a previewed set: ``queued`` (``applied_by`` = ``actor``, ``applied_timestamp``,
    and ``reason`` when given) and, once this commits, send ``kind.task``. Confirming a set
    that is queued or running sends the task again (a resume: done targets are skipped); the
    first confirmation's fields stay.

    Raises:
        Conflict: ``<kind.code>_done`` when it has finished.
    """
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=entry_id)
        if entry.state == AuditEntry.State.DONE:
            raise kind.conflict(entry.pk, f"has finished: {entry.result}", "done")
        if entry.state == AuditEntry.State.PREVIEWED:
            entry.state = AuditEntry.State.QUEUED
            entry.applied_by = actor
            entry.applied_timestamp = now_ms()
            fields = ["state", "applied_by", "applied_timestamp"]
            if reason is not None:
                entry.reason = reason
                fields.append("reason")
            entry.save(update_fields=fields)
        transaction.on_commit(lambda: current_app.send_task(kind.task, args=[entry_id]))
    return entry


def frozen_set_run(entry_id: int, kind: FrozenSetKind, act: TargetAction) -> AuditEntry:
    """Run a queued (or interrupted running) set: ``act`` on each pending target in id order,
    each in its own database transaction with its outcome. Safe to run again, or twice at
    once (a target is taken only while pending, ``SKIP LOCKED``).

    Returns:
        the entry, ``done`` with ``counts`` ``{done, already_ended, failed}`` and ``result``
        their summary (a done entry is returned as it is).

    Raises:
        Conflict: ``<kind.code>_not_applied`` (still previewed).
    """
    with transaction.atomic():
        entry = AuditEntry.objects.select_for_update().get(pk=entry_id)
        if entry.state == AuditEntry.State.DONE:
            return entry
        if entry.state == AuditEntry.State.PREVIEWED:
            raise kind.conflict(entry.pk, "was previewed, not applied", "not_applied")
        entry.state = AuditEntry.State.RUNNING
        entry.save(update_fields=["state"])
    progress = TargetProgress(entry)
    last_id = 0
    while batch := list(
        entry.targets.filter(result=Result.PENDING, id__gt=last_id)
        .order_by("id")
        .values_list("id", flat=True)[:CHUNK]
    ):
        for target_id in batch:
            last_id = target_id
            result = _target_run(entry, target_id, act)
            if result is not None:
                progress.add(result)
    return progress.finish()


def _target_run(entry: AuditEntry, target_id: int, act: TargetAction) -> str | None:
    """``act`` on one pending target in one database transaction with its result; None when
    it is not pending any more (another run took it)."""
    with transaction.atomic():
        target = (
            AuditTarget.objects.select_for_update(skip_locked=True)
            .filter(pk=target_id, result=Result.PENDING)
            .first()
        )
        if target is None:
            return None
        target.result, detail = act(entry, target)
        target.detail = {**target.detail, **detail}
        target.save(update_fields=["result", "detail"])
    return target.result


def frozen_set_counts(entry: AuditEntry) -> dict[str, int]:
    """The entry's targets counted by result: ``{pending, done, already_ended, failed}``."""
    counts = dict.fromkeys(Result.values, 0)
    for row in entry.targets.values("result").annotate(n=Count("id")):
        counts[row["result"]] = row["n"]
    return counts


class TargetProgress:
    """Counts of one run over an entry's frozen targets, saved on the entry and announced
    (``bulk.progress``, ``bulk_id`` = the entry's id) at most every ``PROGRESS_INTERVAL_MS``
    and at the end; the bulk page and the dead-letter set's page listen the same way."""

    def __init__(self, entry: AuditEntry) -> None:
        self.entry = entry
        self.counts = frozen_set_counts(entry)
        self.last = 0
        self._publish()

    def add(self, result: str) -> None:
        self.counts[result] += 1
        self.counts[Result.PENDING] -= 1
        if now_ms() - self.last >= PROGRESS_INTERVAL_MS:
            self._publish()

    def finish(self) -> AuditEntry:
        entry = self.entry
        self.counts = frozen_set_counts(entry)
        entry.state = AuditEntry.State.DONE
        entry.finished_timestamp = now_ms()
        entry.result = ", ".join(f"{self.counts[r]} {r.replace('_', ' ')}" for r in OUTCOMES)
        self._publish()
        logger.info("%s #%d done: %s", entry.action, entry.pk, entry.result)
        return entry

    def _publish(self) -> None:
        entry = self.entry
        entry.counts = {r: self.counts[r] for r in OUTCOMES}
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

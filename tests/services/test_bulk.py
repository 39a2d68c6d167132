"""Bulk operator actions (``broker.services.operations.bulk``): a preview freezes the set, the run acts on
that set only, reports each transaction, publishes its progress and can be resumed."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import Conflict, InvalidInput, NotFound
from broker.models import AuditEntry, Resolution, Transaction, TransactionEvent
from broker.services.operations import bulk as bulk_service
from broker.services.operations import frozen_sets
from broker.services.operations.bulk import (
    bulk_apply,
    bulk_preview_filter,
    bulk_preview_selection,
    bulk_run,
)
from broker.services.recovery import transactions_rebuild
from broker.services.transactions.end import transaction_end
from tasks.operations import bulk_action_run
from tests.services.test_operator import discarded
from tests.support import prepare

OPERATOR = "console:olga"


def preview(action: str = "rollback", **filters: Any) -> AuditEntry:
    return bulk_preview_filter(
        action=action,
        reason="clean up after incident 12",
        actor=OPERATOR,
        via="console",
        filters={"producer_group": "G", **filters},
    )


def applied(entry: AuditEntry, django_capture_on_commit_callbacks) -> AuditEntry:
    """Confirm ``entry``; the task it queues after commit is not run (the test runs it)."""
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        entry = bulk_apply(bulk_id=entry.pk, actor="console:pat")
    assert len(callbacks) == 1
    return entry


def states(txs: list[Transaction]) -> list[str]:
    return [Transaction.objects.get(pk=t.pk).state for t in txs]


@pytest.fixture
def published(monkeypatch) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(frozen_sets, "bulk_action_progress_publish", events.append)
    return events


def test_a_bulk_on_a_filter_acts_on_the_frozen_set_only(
    topic, producer_group, django_capture_on_commit_callbacks, published
):
    old = [prepare(), prepare(), discarded(prepare())]

    entry = preview("rollback")
    assert (entry.state, entry.total, entry.action) == ("previewed", 3, "bulk-rollback")
    assert list(entry.targets.values_list("transaction_id", "result")) == [
        (t.pk, "pending") for t in old
    ]
    assert entry.scope["kind"] == "filter" and entry.scope["filters"]["producer_group"] == "G"
    # A transaction that arrives after the preview matches the filter but is not in the set.
    late = prepare()
    assert states(old + [late]) == ["PREPARED", "PREPARED", "DISCARDED", "PREPARED"]

    entry = applied(entry, django_capture_on_commit_callbacks)
    assert (entry.state, entry.applied_by) == ("queued", "console:pat")
    entry = bulk_run(entry.pk)

    assert states(old) == ["ROLLED_BACK"] * 3
    assert states([late]) == ["PREPARED"]
    assert (entry.state, entry.processed) == ("done", 3)
    assert entry.counts == {"done": 3, "already_ended": 0, "failed": 0}
    assert entry.result == "3 done, 0 already ended, 0 failed"
    assert set(entry.targets.values_list("result", flat=True)) == {"done"}
    # Each action is in the transaction's journal, by whoever confirmed it, naming the bulk.
    events = TransactionEvent.objects.filter(kind="resolved").order_by("id")
    assert [(e.transaction_id, e.actor) for e in events] == [(t.pk, "console:pat") for t in old]
    assert {e.detail["audit_entry_id"] for e in events} == {entry.pk}
    assert {e.detail["reason"] for e in events} == {"clean up after incident 12"}
    # No audit entry per transaction: the bulk's targets are the record.
    assert AuditEntry.objects.count() == 1
    # Progress: published at the start, throttled, and at the end.
    assert published[-1]["state"] == "done"
    assert (published[-1]["processed"], published[-1]["total"]) == (3, 3)
    assert published[-1]["counts"] == {"done": 3, "already_ended": 0, "failed": 0}
    assert published[0]["type"] == "bulk.progress" and published[0]["bulk_id"] == entry.pk
    assert len(published) <= 5
    assert transactions_rebuild(dry_run=True).differences == []


def test_targets_that_ended_after_the_preview_are_reported_with_who_ended_them(
    topic, producer_group, django_capture_on_commit_callbacks, published
):
    txs = [prepare(), prepare(), prepare()]
    entry = bulk_preview_selection(
        action="commit",
        reason="producer down",
        actor=OPERATOR,
        via="console",
        transaction_ids=[t.pk for t in txs] + ["NOPE"],
    )
    assert entry.total == 3 and entry.scope["skipped"] == ["NOPE"]
    transaction_end(transaction_id=txs[1].pk, producer_group="G", action="rollback")

    applied(entry, django_capture_on_commit_callbacks)
    entry = bulk_run(entry.pk)

    assert states(txs) == ["COMMITTED", "ROLLED_BACK", "COMMITTED"]
    results = dict(entry.targets.values_list("transaction_id", "result"))
    assert results == {txs[0].pk: "done", txs[1].pk: "already_ended", txs[2].pk: "done"}
    ended = entry.targets.get(transaction_id=txs[1].pk).detail
    assert (ended["state"], ended["resolved_by"]) == ("ROLLED_BACK", "producer")
    assert ended["ended_by"].startswith("its producer at")
    assert entry.counts == {"done": 2, "already_ended": 1, "failed": 0}
    assert Resolution.objects.get(transaction_id=txs[1].pk).resolved_by == "producer"


def test_a_bulk_resume_check_freezes_only_discarded_transactions(
    topic, producer_group, django_capture_on_commit_callbacks, published
):
    prepared, gone = prepare(), discarded(prepare())
    entry = preview("resume-check")
    assert list(entry.targets.values_list("transaction_id", flat=True)) == [gone.pk]
    applied(entry, django_capture_on_commit_callbacks)
    bulk_run(entry.pk)
    assert states([prepared, gone]) == ["PREPARED", "PREPARED"]
    assert TransactionEvent.objects.get(kind="resumed").detail["audit_entry_id"] == entry.pk


def test_a_bulk_interrupted_by_a_dying_worker_resumes_without_redoing_a_target(
    topic, producer_group, django_capture_on_commit_callbacks, published, monkeypatch
):
    prepared = {t.pk: t for t in (prepare() for _ in range(5))}
    entry = applied(preview("commit"), django_capture_on_commit_callbacks)
    # The targets in the order the bulk takes them (the stuck list's: born time, then id; five
    # transactions prepared in one millisecond are ordered by their random ids).
    txs = [
        prepared[i] for i in entry.targets.order_by("id").values_list("transaction_id", flat=True)
    ]
    real = bulk_service.OPERATOR_ACTIONS["commit"]
    calls: list[str] = []

    def dies_on_the_third(**kwargs: Any) -> Transaction:
        calls.append(kwargs["transaction_id"])
        if len(calls) == 3:
            raise SystemExit("worker killed")
        return real(**kwargs)

    monkeypatch.setitem(bulk_service.OPERATOR_ACTIONS, "commit", dies_on_the_third)
    with pytest.raises(SystemExit):
        bulk_run(entry.pk)
    entry.refresh_from_db()
    assert entry.state == "running"
    assert states(txs) == ["COMMITTED", "COMMITTED", "PREPARED", "PREPARED", "PREPARED"]
    assert list(entry.targets.values_list("result", flat=True)) == ["done"] * 2 + ["pending"] * 3

    monkeypatch.setitem(bulk_service.OPERATOR_ACTIONS, "commit", real)
    # Resumed by confirming again (the task is queued again) and running the task.
    with django_capture_on_commit_callbacks(execute=False):
        assert bulk_apply(bulk_id=entry.pk, actor="console:other").applied_by == "console:pat"
    bulk_action_run.apply(args=[entry.pk])

    entry.refresh_from_db()
    assert states(txs) == ["COMMITTED"] * 5
    assert (entry.state, entry.counts["done"], entry.processed) == ("done", 5, 5)
    assert TransactionEvent.objects.filter(kind="resolved").count() == 5
    assert Resolution.objects.count() == 5
    # Done is done: running it again or confirming it changes nothing.
    assert bulk_run(entry.pk).result == "5 done, 0 already ended, 0 failed"
    with pytest.raises(Conflict) as finished:
        bulk_apply(bulk_id=entry.pk, actor=OPERATOR)
    assert finished.value.code == "bulk_done"
    assert transactions_rebuild(dry_run=True).differences == []


def test_an_unexpected_error_fails_one_target_and_the_bulk_goes_on(
    topic, producer_group, django_capture_on_commit_callbacks, published, monkeypatch
):
    txs = [prepare(), prepare()]
    entry = applied(preview("rollback"), django_capture_on_commit_callbacks)
    real = bulk_service.OPERATOR_ACTIONS["rollback"]

    def breaks_the_first(**kwargs: Any) -> Transaction:
        if kwargs["transaction_id"] == txs[0].pk:
            raise RuntimeError("disk on fire")
        return real(**kwargs)

    monkeypatch.setitem(bulk_service.OPERATOR_ACTIONS, "rollback", breaks_the_first)
    entry = bulk_run(entry.pk)
    assert states(txs) == ["PREPARED", "ROLLED_BACK"]
    failed = entry.targets.get(transaction_id=txs[0].pk)
    assert failed.result == "failed" and "disk on fire" in failed.detail["error"]
    assert entry.counts == {"done": 1, "already_ended": 0, "failed": 1}


def test_a_preview_refuses_nothing_to_do_too_many_no_reason_and_bad_actions(
    topic, producer_group, monkeypatch
):
    with pytest.raises(InvalidInput) as empty:
        preview("rollback")
    assert empty.value.code == "bulk_empty"
    for _ in range(3):
        prepare()
    monkeypatch.setattr(bulk_service, "BULK_MAX_TARGETS", 2)
    with pytest.raises(InvalidInput) as large:
        preview("rollback")
    assert large.value.code == "bulk_too_large"
    assert large.value.details == {"count": 3, "max": 2}
    assert "at most 2" in large.value.message
    with pytest.raises(InvalidInput) as unreasoned:
        bulk_preview_filter(action="commit", reason=" ", actor=OPERATOR, via="console", filters={})
    assert unreasoned.value.code == "reason_required"
    with pytest.raises(InvalidInput) as bad:
        preview("check-now")
    assert bad.value.code == "invalid_action"
    assert AuditEntry.objects.count() == 0


def test_a_previewed_bulk_is_not_run_and_an_unknown_one_is_not_found(topic, producer_group):
    prepare()
    entry = preview("rollback")
    with pytest.raises(Conflict) as not_applied:
        bulk_run(entry.pk)
    assert not_applied.value.code == "bulk_not_applied"
    with pytest.raises(NotFound) as missing:
        bulk_apply(bulk_id=entry.pk + 1, actor=OPERATOR)
    assert missing.value.code == "bulk_not_found"

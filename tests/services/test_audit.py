"""The operators' audit log: every console and API action is recorded once with who, when,
what, why and the result (``broker.services.operations.audit``), and read back filtered and paged
(``broker.selectors.audit``)."""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site

from broker.errors import InvalidInput, TransactionAlreadyResolved
from broker.models import AuditEntry, AuditTarget, TransactionEvent
from broker.selectors.audit import audit_entries, bulk_get, bulk_targets_page
from broker.services.operations.bulk import bulk_preview_selection
from broker.services.transactions.end import transaction_end
from broker.services.transactions.operator import (
    transaction_check_now,
    transaction_operator_resolve,
)
from tests.support import prepare


def test_a_done_action_and_its_entry_commit_together_and_the_event_names_the_entry(
    topic, producer_group
):
    tx = prepare()
    transaction_operator_resolve(
        transaction_id=tx.pk, action="commit", reason="paid", actor="console:ann", via="console"
    )
    [entry] = AuditEntry.objects.all()
    assert (entry.actor, entry.via, entry.action, entry.reason) == (
        "console:ann",
        "console",
        "commit",
        "paid",
    )
    assert (entry.state, entry.result, entry.total, entry.processed) == ("done", "COMMITTED", 1, 1)
    [target] = entry.targets.all()
    assert (target.transaction_id, target.result, target.detail) == (
        tx.pk,
        "done",
        {"state": "COMMITTED"},
    )
    event = TransactionEvent.objects.get(transaction_id=tx.pk, kind="resolved")
    assert event.detail["audit_entry_id"] == entry.pk and event.detail["via"] == "console"


def test_an_action_without_a_reason_changes_nothing_and_is_not_an_entry(topic, producer_group):
    tx = prepare()
    with pytest.raises(InvalidInput):
        transaction_check_now(transaction_id=tx.pk, reason="", actor="console:ann")
    assert not AuditEntry.objects.exists()


def test_the_audit_log_filters_by_actor_action_via_transaction_and_time(topic, producer_group):
    a, b, c = prepare(), prepare(), prepare()
    transaction_operator_resolve(
        transaction_id=a.pk, action="rollback", reason="r1", actor="console:ann", via="console"
    )
    transaction_check_now(transaction_id=b.pk, reason="r2", actor="operator:ops", via="api")
    transaction_end(transaction_id=c.pk, producer_group="G", action="commit")
    with pytest.raises(TransactionAlreadyResolved):
        transaction_operator_resolve(
            transaction_id=c.pk, action="commit", reason="r3", actor="console:bob", via="console"
        )
    bulk = bulk_preview_selection(
        action="commit", reason="r4", actor="console:ann", via="console", transaction_ids=[b.pk]
    )
    ids = list(AuditEntry.objects.order_by("id").values_list("id", flat=True))

    def found(**filters) -> list[int]:
        return [e.pk for e in audit_entries(**filters).entries]

    assert found() == ids[::-1]  # newest first
    assert found(actor="ann") == [ids[3], ids[0]]
    assert found(actor="console:ann") == [ids[3], ids[0]]
    assert found(actor="an") == []
    assert found(action="check-now") == [ids[1]]
    assert found(via="api") == [ids[1]]
    assert found(transaction_id=b.pk) == [ids[3], ids[1]]
    assert found(transaction_id=c.pk) == [ids[2]]
    first = AuditEntry.objects.get(pk=ids[0]).timestamp
    assert found(since_ms=first + 10**9) == []
    assert found(until_ms=first) == []
    assert ids[0] in found(since_ms=first, until_ms=first + 1)
    # The refusal says what ended the transaction.
    refused = AuditEntry.objects.get(pk=ids[2])
    assert refused.state == "refused" and "by its producer" in refused.result
    assert refused.targets.get().result == "already_ended"
    assert bulk_get(bulk.pk) == bulk


def test_audit_pages_are_keyset_pages_with_a_bounded_number_of_queries(
    topic, producer_group, django_assert_max_num_queries
):
    for i in range(7):
        tx = prepare()
        transaction_check_now(transaction_id=tx.pk, reason=f"r{i}", actor="console:ann")
    with django_assert_max_num_queries(2):
        first = audit_entries(limit=3)
        assert [t.transaction_id for t in first.entries[0].shown_targets]
    pages = [first.entries]
    while first.next_before:
        first = audit_entries(limit=3, before=first.next_before)
        pages.append(first.entries)
    assert [len(p) for p in pages] == [3, 3, 1]
    seen = [e.pk for p in pages for e in p]
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == 7


def test_a_bulk_page_lists_its_frozen_targets_with_the_transactions_now(
    topic, producer_group, django_assert_max_num_queries
):
    txs = [prepare() for _ in range(5)]
    bulk = bulk_preview_selection(
        action="rollback",
        reason="r",
        actor="console:ann",
        via="console",
        transaction_ids=[t.pk for t in txs],
    )
    with django_assert_max_num_queries(3):
        page = bulk_targets_page(bulk, page=2, per_page=2)
        rows = list(page.object_list)
    assert [r.target.transaction_id for r in rows] == [txs[2].pk, txs[3].pk]
    assert [r.tx.state for r in rows] == ["PREPARED", "PREPARED"]
    assert page.paginator.num_pages == 3


def test_the_admin_shows_the_audit_log_read_only(rf, admin_user):
    request = rf.get("/admin/")
    request.user = admin_user
    for model in (AuditEntry, AuditTarget):
        model_admin = site._registry[model]
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)

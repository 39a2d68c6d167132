"""Bulk previews of an operator scoped to producer groups (``broker.services.operations.bulk``,
``allowed_producer_groups``): the other groups' transactions are left out of the frozen set,
the entry's scope says how many and of which groups, and only an operator of every target's
group confirms it."""

from __future__ import annotations

import pytest

from broker.errors import Forbidden, InvalidInput
from broker.models import AuditEntry, Transaction
from broker.services.operations.bulk import (
    bulk_apply,
    bulk_preview_filter,
    bulk_preview_selection,
    bulk_run,
    excluded_text,
)
from broker.services.topology.writes import producer_group_create
from tests.services.test_operator import discarded
from tests.support import prepare

PAULA = "console:paula"  # operates producer group payments only
PAYMENTS = frozenset({"payments"})


@pytest.fixture
def groups(topic):
    for name in ("payments", "orders", "refunds"):
        producer_group_create(name=name, check_url=None)


def select(ids, *, allowed=PAYMENTS, action="rollback") -> AuditEntry:
    return bulk_preview_selection(
        action=action,
        reason="incident 12",
        actor=PAULA,
        via="console",
        transaction_ids=ids,
        allowed_producer_groups=allowed,
    )


def test_a_selection_leaves_out_other_groups_and_says_so(groups):
    mine = [prepare(producer_group="payments"), prepare(producer_group="payments")]
    theirs = [
        prepare(producer_group="orders"),
        prepare(producer_group="orders"),
        prepare(producer_group="refunds"),
    ]
    ended = prepare(producer_group="payments")
    Transaction.objects.filter(pk=ended.pk).update(state="ROLLED_BACK", resolved_by="operator")
    ids = [t.pk for t in [theirs[0], mine[0], theirs[1], ended, theirs[2], mine[1]]]

    entry = select(ids + ["NO-SUCH-ID"])

    assert entry.total == 2
    assert sorted(entry.targets.values_list("transaction_id", flat=True)) == sorted(
        t.pk for t in mine
    )
    assert entry.scope["operator_producer_groups"] == ["payments"]
    assert entry.scope["excluded"] == {
        "count": 3,
        "producer_groups": [
            {"producer_group": "orders", "count": 2},
            {"producer_group": "refunds", "count": 1},
        ],
        "transaction_ids": [theirs[0].pk, theirs[1].pk, theirs[2].pk],
    }
    # Skipped (the state does not allow it, or unknown) is not "left out".
    assert entry.scope["skipped"] == [ended.pk, "NO-SUCH-ID"]
    assert entry.result == (
        "previewed: 2 transactions to rollback; left out: 3 transactions of producer groups "
        "orders (2), refunds (1)"
    )


def test_a_filter_leaves_out_other_groups_with_counts(groups):
    mine = [prepare(producer_group="payments"), discarded(prepare(producer_group="payments"))]
    for _ in range(3):
        prepare(producer_group="orders")

    entry = bulk_preview_filter(
        action="commit",
        reason="incident 12",
        actor=PAULA,
        via="console",
        filters={},
        allowed_producer_groups=PAYMENTS,
    )

    assert sorted(entry.targets.values_list("transaction_id", flat=True)) == sorted(
        t.pk for t in mine
    )
    assert entry.scope["excluded"] == {
        "count": 3,
        "producer_groups": [{"producer_group": "orders", "count": 3}],
    }
    assert entry.scope["kind"] == "filter"


def test_only_what_the_action_would_change_is_counted_as_left_out(groups):
    prepare(producer_group="orders")  # PREPARED: resume-check does not apply
    discarded(prepare(producer_group="orders"))
    mine = discarded(prepare(producer_group="payments"))

    entry = bulk_preview_filter(
        action="resume-check",
        reason="r",
        actor=PAULA,
        via="console",
        filters={},
        allowed_producer_groups=PAYMENTS,
    )

    assert list(entry.targets.values_list("transaction_id", flat=True)) == [mine.pk]
    assert entry.scope["excluded"]["count"] == 1


def test_nothing_left_out_is_recorded_as_zero(groups):
    tx = prepare(producer_group="payments")
    entry = select([tx.pk])
    assert entry.scope["excluded"] == {"count": 0, "producer_groups": [], "transaction_ids": []}
    assert entry.result == "previewed: 1 transactions to rollback"


def test_a_full_operators_preview_has_no_exclusion(groups):
    txs = [prepare(producer_group="payments"), prepare(producer_group="orders")]
    entry = select([t.pk for t in txs], allowed=None)
    assert entry.total == 2
    assert "excluded" not in entry.scope and "operator_producer_groups" not in entry.scope


def test_a_scope_of_only_other_groups_is_403_and_writes_nothing(groups):
    theirs = [prepare(producer_group="orders"), prepare(producer_group="refunds")]

    with pytest.raises(Forbidden) as refused:
        select([t.pk for t in theirs])

    assert refused.value.code == "bulk_outside_scope"
    assert refused.value.details["excluded"]["count"] == 2
    assert "orders (1), refunds (1)" in refused.value.message
    assert not AuditEntry.objects.exists()


def test_a_consumer_only_operator_can_preview_no_transaction(groups):
    tx = prepare(producer_group="payments")
    with pytest.raises(Forbidden):
        select([tx.pk], allowed=frozenset())


def test_an_empty_scope_without_exclusion_stays_bulk_empty(groups):
    prepare(producer_group="orders")
    with pytest.raises(InvalidInput) as refused:
        bulk_preview_filter(
            action="resume-check",
            reason="r",
            actor=PAULA,
            via="console",
            filters={},
            allowed_producer_groups=PAYMENTS,
        )
    assert refused.value.code == "bulk_empty"


def test_a_scoped_operator_confirms_only_bulks_within_its_groups(
    groups, django_capture_on_commit_callbacks
):
    mine = prepare(producer_group="payments")
    theirs = prepare(producer_group="orders")
    full_bulk = select([mine.pk, theirs.pk], allowed=None)  # previewed by a full operator
    own_bulk = select([mine.pk])

    with pytest.raises(Forbidden) as refused:
        bulk_apply(bulk_id=full_bulk.pk, actor=PAULA, allowed_producer_groups=PAYMENTS)
    assert refused.value.code == "bulk_outside_scope"
    assert refused.value.details == {"bulk_id": full_bulk.pk, "producer_groups": ["orders"]}
    full_bulk.refresh_from_db()
    assert full_bulk.state == "previewed"

    with django_capture_on_commit_callbacks(execute=False):
        bulk_apply(bulk_id=own_bulk.pk, actor=PAULA, allowed_producer_groups=PAYMENTS)
    done = bulk_run(own_bulk.pk)
    assert done.counts == {"done": 1, "already_ended": 0, "failed": 0}
    assert Transaction.objects.get(pk=mine.pk).state == "ROLLED_BACK"
    assert Transaction.objects.get(pk=theirs.pk).state == "PREPARED"


def test_excluded_in_words():
    assert excluded_text(
        {"count": 1, "producer_groups": [{"producer_group": "a", "count": 1}]}
    ) == ("1 transaction of producer group a (1)")
    assert (
        excluded_text(
            {
                "count": 3,
                "producer_groups": [
                    {"producer_group": "a", "count": 1},
                    {"producer_group": "b", "count": 2},
                ],
            }
        )
        == "3 transactions of producer groups a (1), b (2)"
    )

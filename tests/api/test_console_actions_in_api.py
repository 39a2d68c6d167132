"""What the console does, the API does too: check now (operators, scoped keys on their own
groups), run the reconciliation now, give a topic more queues, read and change a consumer
group (admin key)."""

from __future__ import annotations

import pytest

from broker.models import AuditEntry, ConsumeQueue, ConsumerGroup, TransactionEvent
from broker.rules.clock import now_ms
from broker.services.reconciliation.run import RECONCILE_TASK
from broker.services.topology.writes import consumer_group_create, producer_group_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, post
from tests.services.test_operator import discarded
from tests.support import prepare


def patch(client, url: str, data) -> object:
    return client.patch(url, data, format="json")


@pytest.fixture
def groups(topic):
    producer_group_create(name="payments", check_url=None)
    producer_group_create(name="orders", check_url=None)


def test_check_now_makes_a_prepared_transaction_due_and_is_audited(owner, groups):
    tx = prepare(producer_group="payments", check_immunity_seconds=3600)
    due_before = tx.next_check_timestamp

    response = post(
        owner, f"/api/v1/transactions/{tx.pk}/check-now", {"reason": "the producer is back"}
    )

    assert response.status_code == 200, response.content
    tx.refresh_from_db()
    assert tx.next_check_timestamp <= now_ms() < due_before  # due now, not in an hour
    assert tx.check_times == 0
    event = TransactionEvent.objects.get(transaction_id=tx.pk, kind="check_requested")
    assert event.actor == "operator:owner"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.reason) == ("check-now", "api", "the producer is back")


def test_check_now_needs_a_reason_and_a_prepared_transaction(owner, groups):
    tx = prepare(producer_group="payments")
    gone = discarded(prepare(producer_group="payments"))

    assert_error(post(owner, f"/api/v1/transactions/{tx.pk}/check-now", {}), 400, "reason_required")
    refused = post(owner, f"/api/v1/transactions/{gone.pk}/check-now", {"reason": "r"})
    assert_error(refused, 409, "transaction_not_prepared")
    missing = post(owner, "/api/v1/transactions/NOSUCHTX1/check-now", {"reason": "r"})
    assert_error(missing, 404, "transaction_not_found")


def test_a_scoped_key_checks_now_its_groups_transactions_only(groups):
    ops = scoped_key("payments-ops", producer=["payments"])
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")

    assert (
        post(ops, f"/api/v1/transactions/{mine.pk}/check-now", {"reason": "r"}).status_code == 200
    )
    refused = post(ops, f"/api/v1/transactions/{theirs.pk}/check-now", {"reason": "r"})
    assert assert_error(refused, 403, "permission_denied")["details"] == {
        "producer_group": "orders"
    }
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["check-now"]


def test_run_now_queues_a_reconciliation_named_after_the_key(
    owner, producer, db, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        "broker.services.reconciliation.run.current_app.send_task",
        lambda name, **kwargs: sent.append((name, kwargs)),
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = post(owner, "/api/v1/reconciliation/runs")

    assert response.status_code == 202
    assert response.json() == {"queued": True, "trigger": "operator:owner"}
    assert sent == [(RECONCILE_TASK, {"kwargs": {"trigger": "operator:owner"}})]
    assert_error(post(producer, "/api/v1/reconciliation/runs"), 403, "permission_denied")


def test_a_topic_gets_more_queues_never_fewer(owner, topic):
    response = patch(owner, "/api/v1/topics/TranTest", {"queue_nums": 6})

    assert response.status_code == 200, response.content
    assert response.json()["queue_nums"] == 6
    assert [q["queue_id"] for q in response.json()["queues"]] == list(range(6))
    assert ConsumeQueue.objects.filter(topic="TranTest").count() == 6
    assert_error(
        patch(owner, "/api/v1/topics/TranTest", {"queue_nums": 2}), 400, "invalid_queue_nums"
    )
    assert_error(patch(owner, "/api/v1/topics/TranTest", {"queue_nums": "8"}), 400, "invalid_input")
    assert_error(patch(owner, "/api/v1/topics/Nowhere", {"queue_nums": 8}), 404, "topic_not_found")


def test_a_consumer_group_is_read_and_its_max_delivery_attempts_changed(owner, consumer, db):
    consumer_group_create(name="C", max_delivery_attempts=3)

    read = owner.get("/api/v1/consumer-groups/C")
    changed = patch(owner, "/api/v1/consumer-groups/C", {"max_delivery_attempts": 5})

    assert read.status_code == 200
    assert read.json()["max_delivery_attempts"] == 3
    assert changed.json()["max_delivery_attempts"] == 5
    assert ConsumerGroup.objects.get(name="C").max_delivery_attempts == 5
    bad = patch(owner, "/api/v1/consumer-groups/C", {"max_delivery_attempts": 0})
    assert_error(bad, 400, "invalid_input")
    assert_error(owner.get("/api/v1/consumer-groups/Nobody"), 404, "consumer_group_not_found")
    assert_error(patch(consumer, "/api/v1/consumer-groups/C", {"max_delivery_attempts": 9}), 403)

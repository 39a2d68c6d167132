"""Access keys scoped to groups as operators (``create_access_key --operator-producer-group``):
the payments team's key resolves and resumes the checks of payments' transactions only; another
group's answer 403 in the contract's error body; admin keys work as before; a key without a
grant is refused as before."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from broker.models import AuditEntry, Transaction
from broker.services.access.grants import operator_grants_set
from broker.services.topology.writes import access_key_create, producer_group_create
from tests.api_helpers import assert_error, post
from tests.conftest import client_for
from tests.services.test_operator import discarded
from tests.support import prepare


def scoped_key(name: str, *, producer: list[str], consumer: list[str] = (), **rights) -> APIClient:
    key, token = access_key_create(name=name, **rights)
    operator_grants_set(
        access_key_id=key.pk,
        producer_groups=producer,
        consumer_groups=list(consumer),
        granted_by="test",
    )
    return client_for(token)


@pytest.fixture
def groups(topic):
    producer_group_create(name="payments", check_url=None)
    producer_group_create(name="orders", check_url=None)


@pytest.fixture
def payments_ops(db) -> APIClient:
    """Operates producer group payments (and consumer group billing); no producer rights."""
    return scoped_key("payments-ops", producer=["payments"], consumer=["billing"])


def resolve(client: APIClient, tx: Transaction, action: str = "commit", reason: str = "by hand"):
    return post(
        client, f"/api/v1/transactions/{tx.pk}/resolve", {"action": action, "reason": reason}
    )


def test_a_scoped_key_resolves_a_transaction_of_its_group(payments_ops, groups):
    tx = prepare(producer_group="payments")

    response = resolve(payments_ops, tx)

    assert response.status_code == 200, response.content
    assert (response.json()["state"], response.json()["resolved_by"]) == ("COMMITTED", "operator")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.via, entry.action) == ("operator:payments-ops", "api", "commit")


def test_a_scoped_key_gets_403_on_another_groups_transaction(payments_ops, groups):
    theirs = prepare(producer_group="orders")
    gone = discarded(prepare(producer_group="orders"))

    error = assert_error(resolve(payments_ops, theirs), 403, "permission_denied")
    assert error["details"] == {"producer_group": "orders"}
    resumed = post(payments_ops, f"/api/v1/transactions/{gone.pk}/resume-check", {"reason": "r"})
    assert assert_error(resumed, 403, "permission_denied")["details"] == {
        "producer_group": "orders"
    }
    theirs.refresh_from_db()
    gone.refresh_from_db()
    assert (theirs.state, gone.state) == ("PREPARED", "DISCARDED")
    assert not AuditEntry.objects.exists()


def test_a_scoped_key_resumes_the_checks_of_its_group(payments_ops, groups):
    gone = discarded(prepare(producer_group="payments"))
    response = post(payments_ops, f"/api/v1/transactions/{gone.pk}/resume-check")
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["check_times"]) == ("PREPARED", 0)


def test_an_unknown_transaction_is_404_for_a_scoped_key(payments_ops, groups):
    response = post(
        payments_ops,
        "/api/v1/transactions/0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A/resolve",
        {"action": "commit", "reason": "r"},
    )
    assert_error(response, 404, "transaction_not_found")


def test_a_scoped_keys_bad_body_is_still_400(payments_ops, groups):
    tx = prepare(producer_group="payments")
    assert_error(resolve(payments_ops, tx, reason=""), 400, "reason_required")


def test_admin_keys_work_as_before(owner, groups):
    for group in ("payments", "orders"):
        assert resolve(owner, prepare(producer_group=group), "rollback").status_code == 200
    assert_error(
        post(
            owner,
            "/api/v1/transactions/0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A/resolve",
            {"action": "commit", "reason": "r"},
        ),
        404,
        "transaction_not_found",
    )


def test_keys_without_operator_grants_are_refused_as_before(producer, outsider, groups):
    tx = prepare(producer_group="payments")
    for client in (producer, outsider):
        assert_error(resolve(client, tx), 403, "permission_denied")
        response = post(client, f"/api/v1/transactions/{tx.pk}/resume-check")
        assert_error(response, 403, "permission_denied")


def test_a_consumer_group_grant_operates_no_transaction(groups):
    billing_ops = scoped_key("billing-ops", producer=[], consumer=["billing"])
    error = assert_error(resolve(billing_ops, prepare(producer_group="payments")), 403)
    assert error["details"] == {"producer_group": "payments"}


def test_a_scoped_key_reads_the_transactions_it_operates(payments_ops, groups):
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")

    assert payments_ops.get(f"/api/v1/transactions/{mine.pk}").status_code == 200
    assert payments_ops.get(f"/api/v1/transactions/{mine.pk}/timeline").status_code == 200
    assert payments_ops.get(f"/api/v1/transactions/{mine.pk}/check-explanation").status_code == 200
    assert_error(payments_ops.get(f"/api/v1/transactions/{theirs.pk}"), 403)
    listed = payments_ops.get("/api/v1/transactions").json()["results"]
    assert [t["transaction_id"] for t in listed] == [mine.pk]


def test_a_key_that_produces_for_one_group_and_operates_another_lists_both(groups):
    producer_group_create(name="refunds", check_url=None)
    both = scoped_key("mixed", producer=["payments"], producer_groups=["refunds"])
    txs = [prepare(producer_group=g) for g in ("payments", "refunds", "orders")]

    listed = both.get("/api/v1/transactions").json()["results"]

    assert sorted(t["transaction_id"] for t in listed) == sorted(t.pk for t in txs[:2])


def test_a_scoped_key_lists_in_a_fixed_number_of_queries(
    payments_ops, groups, django_assert_max_num_queries
):
    for _ in range(20):
        prepare(producer_group="payments")
    with django_assert_max_num_queries(4):  # key (cached after), grants, count, page
        response = payments_ops.get("/api/v1/transactions")
    assert len(response.json()["results"]) == 20


def test_an_operator_grant_gives_no_right_to_send(payments_ops, groups):
    response = post(
        payments_ops,
        "/api/v1/transactions",
        {"producer_group": "payments", "topic": "TranTest", "body": "x"},
    )
    assert_error(response, 403, "permission_denied")
    assert_error(post(payments_ops, "/api/v1/messages", {"topic": "TranTest", "body": "x"}), 403)

"""The statement budget of one transaction on PostgreSQL (docs/design.md, "Statements per
transaction"): the SQL statements a producer's POST /api/v1/transactions (half message) and
POST /api/v1/transactions/{id}/end (commit or rollback) send through the DRF test client,
counted with Django's ``CaptureQueriesContext`` after a warm-up transaction (access key,
producer group and topic in the lookup cache). ``CaptureQueriesContext`` records BEGIN, COMMIT
and the SAVEPOINT statements of nested ``atomic()`` blocks too, so they count against the
budget like any other round trip.

A regression names every statement in the assertion message. The end rules the one-statement
end must keep (same end again 200, the other 409 and journalled, one resolution under a race,
gap-free queue offsets) are checked here too.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from broker.errors import TransactionAlreadyResolved
from broker.lookups import access_key_generation_refresh
from broker.models import ConsumeQueue, Message, Resolution, Transaction, TransactionEvent
from broker.rules.states import TransactionState
from broker.services.transactions.end import transaction_end
from tests.api_helpers import end, post, send_half

pytestmark = pytest.mark.django_db(transaction=True)

# The budgets this code reaches (statements sent to PostgreSQL for one request, after warm-up).
PREPARE_BUDGET = 1
COMMIT_BUDGET = 1
ROLLBACK_BUDGET = 1


def _statements(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``call`` and return its result and the SQL statements it sent, in order."""
    with CaptureQueriesContext(connection) as captured:
        result = call()
    return result, [q["sql"] for q in captured.captured_queries]


def _readable(statements: list[str]) -> str:
    return "\n".join(f"  {i + 1}. {sql[:300]}" for i, sql in enumerate(statements))


def _assert_budget(what: str, statements: list[str], budget: int) -> None:
    assert len(statements) <= budget, (
        f"{what}: {len(statements)} statements, budget {budget}:\n{_readable(statements)}"
    )


@pytest.fixture
def warm(producer, producer_group, topic) -> Any:
    """The producer's client after one whole transaction (send, commit): caches filled, under
    the access keys' generation that the key's creation wrote to Redis (read at once, not when
    this process would next read it, so the measured request does not miss the cache)."""
    access_key_generation_refresh()
    sent = send_half(producer)
    assert sent.status_code == 201, sent.content
    ended = end(producer, sent.json()["transaction_id"], "commit")
    assert ended.status_code == 200, ended.content
    return producer


def test_prepare_is_within_budget(warm) -> None:
    response, statements = _statements(lambda: send_half(warm))
    assert response.status_code == 201, response.content
    _assert_budget("POST /transactions", statements, PREPARE_BUDGET)
    tx = Transaction.objects.get(pk=response.json()["transaction_id"])
    assert tx.state == TransactionState.PREPARED
    assert (
        Message.objects.filter(msg_id=tx.transaction_id, topic="RMQ_SYS_TRANS_HALF_TOPIC").count()
        == 1
    )


def test_commit_is_within_budget(warm) -> None:
    tid = send_half(warm).json()["transaction_id"]
    response, statements = _statements(lambda: end(warm, tid, "commit"))
    assert response.status_code == 200, response.content
    assert response.json()["state"] == TransactionState.COMMITTED
    _assert_budget("POST /transactions/{id}/end commit", statements, COMMIT_BUDGET)
    assert Message.objects.filter(msg_id=tid, topic="TranTest").count() == 1
    assert Resolution.objects.filter(transaction_id=tid).count() == 1


def test_rollback_is_within_budget(warm) -> None:
    tid = send_half(warm).json()["transaction_id"]
    response, statements = _statements(lambda: end(warm, tid, "rollback"))
    assert response.status_code == 200, response.content
    assert response.json()["state"] == TransactionState.ROLLED_BACK
    _assert_budget("POST /transactions/{id}/end rollback", statements, ROLLBACK_BUDGET)
    assert not Message.objects.filter(msg_id=tid, topic="TranTest").exists()
    assert Resolution.objects.filter(transaction_id=tid).count() == 1


def test_the_one_statement_end_keeps_the_end_rules(warm) -> None:
    """The same end again answers 200 and stores nothing; the other end is 409 and journalled;
    another group is 403; an unknown id is 404; unknown changes nothing."""
    tid = send_half(warm).json()["transaction_id"]
    assert end(warm, tid, "unknown").json()["state"] == TransactionState.PREPARED
    first = end(warm, tid, "commit")
    assert first.status_code == 200, first.content
    again = end(warm, tid, "commit")
    assert again.status_code == 200 and again.json() == first.json()
    assert Message.objects.filter(msg_id=tid, topic="TranTest").count() == 1
    refused = end(warm, tid, "rollback")
    assert refused.status_code == 409, refused.content
    assert TransactionEvent.objects.filter(
        transaction_id=tid, kind=TransactionEvent.Kind.END_REFUSED
    ).exists()
    assert Resolution.objects.filter(transaction_id=tid).count() == 1
    other = send_half(warm).json()["transaction_id"]
    assert end(warm, other, "commit", producer_group="H").status_code == 403
    assert end(warm, "0" * 32, "commit").status_code == 404
    assert Transaction.objects.get(pk=other).state == TransactionState.PREPARED


def test_commits_take_gap_free_offsets(warm) -> None:
    """Each commit takes the next offset of its real queue: no offset is skipped or reused."""
    ids = [send_half(warm).json()["transaction_id"] for _ in range(12)]
    for tid in ids:
        assert end(warm, tid, "commit").status_code == 200
    per_queue: dict[int, list[int]] = {}
    for queue_id, offset in Message.objects.filter(topic="TranTest").values_list(
        "queue_id", "queue_offset"
    ):
        per_queue.setdefault(queue_id, []).append(offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets))), per_queue
    for tx in Transaction.objects.filter(pk__in=ids):
        delivered = Message.objects.get(msg_id=tx.pk, topic="TranTest")
        assert (tx.queue_id, tx.queue_offset) == (delivered.queue_id, delivered.queue_offset)
        assert delivered.prepared_transaction_offset == tx.half_commit_log_offset
        assert "REAL_TOPIC" not in delivered.properties


def test_concurrent_ends_resolve_once(warm) -> None:
    """Ends of one transaction racing from several database connections: one resolution, one
    delivery at most, every other end answered as the contract says (the same action 200, the
    other 409), and the queue counter moved only by the delivery."""
    for round_ in range(5):
        tid = send_half(warm).json()["transaction_id"]
        actions = ["commit", "rollback"] * 4

        def race(action: str, tid: str = tid) -> tuple[str, str]:
            try:
                tx = transaction_end(transaction_id=tid, producer_group="G", action=action)
                return action, tx.state
            except TransactionAlreadyResolved:
                return action, "refused"
            finally:
                connections.close_all()

        with ThreadPoolExecutor(max_workers=len(actions)) as pool:
            answers = list(pool.map(race, actions))
        tx = Transaction.objects.get(pk=tid)
        winner = "commit" if tx.state == TransactionState.COMMITTED else "rollback"
        for action, answer in answers:
            assert answer == (tx.state if action == winner else "refused"), (round_, answers)
        assert Resolution.objects.filter(transaction_id=tid).count() == 1
        delivered = Message.objects.filter(msg_id=tid, topic="TranTest").count()
        assert delivered == (1 if winner == "commit" else 0)
    counters = dict(
        ConsumeQueue.objects.filter(topic="TranTest").values_list("queue_id", "max_offset")
    )
    for queue_id, max_offset in counters.items():
        assert max_offset == Message.objects.filter(topic="TranTest", queue_id=queue_id).count()


def test_unknown_is_one_read(warm) -> None:
    """An end with ``unknown`` changes nothing, so it is one read of the row."""
    tid = send_half(warm).json()["transaction_id"]
    response, statements = _statements(lambda: end(warm, tid, "unknown"))
    assert response.status_code == 200, response.content
    assert response.json() == {"transaction_id": tid, "state": TransactionState.PREPARED}
    _assert_budget("POST /transactions/{id}/end unknown", statements, 1)


# --- Batches: a statement per batch, not per item ------------------------------------------------

BATCH_SIZE = 32
PREPARE_BATCH_BUDGET = 1  # all halves in one statement, no read of stored msg_ids first
END_BATCH_BUDGET = 1  # every commit in one statement
MESSAGE_BATCH_BUDGET = 1


def _batch_halves() -> list[dict[str, Any]]:
    return [{"producer_group": "G", "topic": "TranTest", "body": "paid"} for _ in range(BATCH_SIZE)]


def test_a_batch_of_half_messages_and_its_end_batch_are_within_budget(warm) -> None:
    response, statements = _statements(
        lambda: post(warm, "/api/v1/transactions/batch", {"messages": _batch_halves()})
    )
    assert response.status_code == 200, response.content
    assert {r["status"] for r in response.json()["results"]} == {201}
    _assert_budget("POST /transactions/batch", statements, PREPARE_BATCH_BUDGET)
    ids = [r["body"]["transaction_id"] for r in response.json()["results"]]
    ends = [{"transaction_id": i, "producer_group": "G", "action": "commit"} for i in ids]

    response, statements = _statements(
        lambda: post(warm, "/api/v1/transactions/end-batch", {"ends": ends})
    )

    assert response.status_code == 200, response.content
    assert {r["body"]["state"] for r in response.json()["results"]} == {"COMMITTED"}
    _assert_budget("POST /transactions/end-batch", statements, END_BATCH_BUDGET)
    assert Message.objects.filter(topic="TranTest", msg_id__in=ids).count() == BATCH_SIZE
    for queue in ConsumeQueue.objects.filter(topic="TranTest"):  # gap-free, every queue
        offsets = Message.objects.filter(topic="TranTest", queue_id=queue.queue_id)
        assert sorted(offsets.values_list("queue_offset", flat=True)) == list(
            range(queue.max_offset)
        )


def test_a_batch_of_normal_messages_is_within_budget(warm) -> None:
    items = [{"topic": "TranTest", "body": f"m{i}"} for i in range(BATCH_SIZE)]
    response, statements = _statements(
        lambda: post(warm, "/api/v1/messages/batch", {"messages": items})
    )
    assert response.status_code == 200, response.content
    assert {r["status"] for r in response.json()["results"]} == {201}
    _assert_budget("POST /messages/batch", statements, MESSAGE_BATCH_BUDGET)

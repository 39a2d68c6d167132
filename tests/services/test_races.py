"""Races: concurrent ends of one transaction, concurrent half sends of one msg_id, concurrent
appends to one queue. Every thread has its own database connection (closed at its end)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.db import connection

from broker.constants import HALF_TOPIC, OP_HALF_TOPIC
from broker.errors import Conflict, HalfmoonError
from broker.models import ConsumeQueue, Message, Resolution, Transaction
from broker.rules.op_body import op_body_parse
from broker.services import checks
from broker.services.commitlog.messages import message_send
from broker.services.topology.writes import access_key_create, producer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.half import transaction_prepare
from broker.services.transactions.op_messages import op_flush
from tests.support import prepare

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 10
THREADS = 20


def _run_together(jobs: list[Callable[[], Any]], timeout_s: float = 60) -> list[Any]:
    """Run each job in its own thread, released at once by a barrier; return their results
    (an exception raised by a job is returned as its result)."""
    start = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on it
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return results


def _check_answer(tx: Transaction, action: str) -> Callable[[], str]:
    """A back-check answer arriving for ``tx``: check_outcomes_apply with COMMIT or ROLLBACK."""
    job = checks.CheckJob(
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        check_url="http://127.0.0.1:9/check",
        signature="",
        body=b"{}",
        check_times=1,
    )

    def apply() -> str:
        checks.check_outcomes_apply(
            [checks.CheckOutcome(job, delivered=True, action=action, status_code=200)]
        )
        return "applied"

    return apply


def _assert_resolved_once(tx: Transaction) -> Transaction:
    tx.refresh_from_db()
    [resolution] = Resolution.objects.filter(transaction=tx)
    expected_state = {"COMMIT": "COMMITTED", "ROLLBACK": "ROLLED_BACK"}[resolution.action]
    assert tx.state == expected_state
    assert tx.resolved_by == resolution.resolved_by
    assert tx.resolved_timestamp is not None and tx.next_check_timestamp is None
    delivered = list(Message.objects.filter(topic=tx.topic, msg_id=tx.transaction_id))
    if tx.state == "COMMITTED":
        [message] = delivered
        assert message.queue_offset == tx.queue_offset
        assert message.queue_id == tx.queue_id
        assert message.prepared_transaction_offset == tx.half_commit_log_offset
    else:
        assert delivered == []
        assert tx.queue_offset is None
    # Once the journal is flushed, exactly one Op message names the half offset, and the
    # journal row points at it.
    op_flush(half_queue_id=tx.half_queue_id, force=True)
    resolution.refresh_from_db()
    naming = [
        op.commit_log_offset
        for op in Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=tx.half_queue_id)
        for offset in op_body_parse(op.body).offsets
        if offset == tx.half_queue_offset
    ]
    assert naming == [resolution.op_commit_log_offset]
    return tx


def _assert_queues_gap_free(topic: str) -> None:
    for queue in ConsumeQueue.objects.filter(topic=topic):
        offsets = sorted(
            Message.objects.filter(topic=topic, queue_id=queue.queue_id).values_list(
                "queue_offset", flat=True
            )
        )
        assert offsets == list(range(queue.max_offset)), (topic, queue.queue_id, offsets)


def _roles(rng: random.Random) -> list[str]:
    roles = (
        ["commit"] * 6
        + ["rollback"] * 6
        + ["check-commit"] * 3  # end with from_transaction_check=true
        + ["answer-commit"] * 3  # a back-check answer applied by check_outcomes_apply
        + ["answer-rollback"] * 2
    )
    assert len(roles) == THREADS
    rng.shuffle(roles)
    return roles


def test_concurrent_ends_over_http_resolve_exactly_once(live_server):
    topic_create(name="TranTest", queue_nums=2)
    producer_group_create(name="G", check_url=None)
    _, token = access_key_create(name="racer", producer_groups=["G"])
    rng = random.Random(20240501)
    winners = Counter()

    for _ in range(ROUNDS):
        tx = prepare()
        url = f"{live_server.url}/api/v1/transactions/{tx.transaction_id}/end"
        roles = _roles(rng)

        def http_end(role: str, url: str = url) -> Callable[[], tuple[str, int, dict]]:
            action = "rollback" if role == "rollback" else "commit"
            body = {
                "producer_group": "G",
                "action": action,
                "from_transaction_check": role == "check-commit",
            }

            def call() -> tuple[str, int, dict]:
                with httpx.Client(timeout=30, trust_env=False) as client:
                    response = client.post(
                        url, json=body, headers={"Authorization": f"Bearer {token}"}
                    )
                return action, response.status_code, response.json()

            return call

        jobs = [
            _check_answer(tx, role.split("-")[1]) if role.startswith("answer-") else http_end(role)
            for role in roles
        ]
        results = _run_together(jobs)

        tx = _assert_resolved_once(tx)
        winners[(tx.state, tx.resolved_by)] += 1
        for role, result in zip(roles, results, strict=True):
            assert not isinstance(result, BaseException), (role, result)
            if role.startswith("answer-"):
                assert result == "applied"
                continue
            action, status, body = result
            agrees = (action == "commit") == (tx.state == "COMMITTED")
            if agrees:
                assert status == 200, (role, status, body)
                assert body["state"] == tx.state
                assert body["transaction_id"] == tx.transaction_id
                if tx.state == "COMMITTED":
                    assert (body["queue_id"], body["queue_offset"]) == (
                        tx.queue_id,
                        tx.queue_offset,
                    )
            else:
                assert status == 409, (role, status, body)
                assert body["error"]["code"] == "transaction_already_resolved"
                assert body["error"]["details"]["state"] == tx.state

    assert sum(winners.values()) == ROUNDS
    _assert_queues_gap_free("TranTest")
    _assert_queues_gap_free(OP_HALF_TOPIC)
    assert Resolution.objects.count() == ROUNDS


def test_concurrent_ends_through_the_service_resolve_exactly_once():
    topic_create(name="TranTest", queue_nums=1)
    producer_group_create(name="G", check_url=None)
    rng = random.Random(7)

    for _ in range(ROUNDS):
        tx = prepare()
        roles = _roles(rng)

        def end(role: str, tx: Transaction = tx) -> Callable[[], Any]:
            action = "rollback" if role == "rollback" else "commit"

            def call() -> Any:
                try:
                    result = transaction_end(
                        transaction_id=tx.transaction_id,
                        producer_group="G",
                        action=action,
                        from_transaction_check=role == "check-commit",
                    )
                    return action, result.state, result.queue_offset
                except HalfmoonError as exc:
                    return action, exc.code, exc.details.get("state")

            return call

        jobs = [
            _check_answer(tx, role.split("-")[1]) if role.startswith("answer-") else end(role)
            for role in roles
        ]
        results = _run_together(jobs)
        tx = _assert_resolved_once(tx)
        for role, result in zip(roles, results, strict=True):
            assert not isinstance(result, BaseException), (role, result)
            if role.startswith("answer-"):
                continue
            action, outcome, detail = result
            if (action == "commit") == (tx.state == "COMMITTED"):
                assert (outcome, detail) == (tx.state, tx.queue_offset), (role, result)
            else:
                assert (outcome, detail) == ("transaction_already_resolved", tx.state), (
                    role,
                    result,
                )

    _assert_queues_gap_free("TranTest")
    assert (
        Message.objects.filter(topic="TranTest").count()
        == Transaction.objects.filter(state="COMMITTED").count()
    )


def test_concurrent_half_sends_with_one_msg_id_store_one_half_message():
    topic_create(name="TranTest", queue_nums=4)
    producer_group_create(name="G", check_url=None)
    producer_group_create(name="Other", check_url=None)

    # The first round also races to create the half topic and its queues.
    for n in range(5):
        msg_id = f"RACE-{n}"

        def send(group: str = "G", msg_id: str = msg_id) -> Any:
            try:
                tx, created = transaction_prepare(
                    producer_group=group, topic="TranTest", body=b"x", msg_id=msg_id
                )
                return tx.transaction_id, tx.half_queue_offset, created
            except Conflict as exc:
                return exc.code

        jobs = [send] * 10 + [lambda msg_id=msg_id: send("Other", msg_id)] * 2
        results = _run_together(jobs)
        assert not [r for r in results if isinstance(r, BaseException)], results
        tx = Transaction.objects.get(pk=msg_id)
        # Either group may win the race for the id; the other group's sends are refused.
        winners, losers = (
            (results[:10], results[10:])
            if tx.producer_group == "G"
            else (
                results[10:],
                results[:10],
            )
        )
        assert losers == ["duplicate_msg_id"] * len(losers), results
        assert set(winners) <= {
            (msg_id, tx.half_queue_offset, True),
            (msg_id, tx.half_queue_offset, False),
        }
        assert sum(created for _, _, created in winners) == 1, results
        assert Message.objects.filter(topic=HALF_TOPIC, msg_id=msg_id).count() == 1
        assert Transaction.objects.filter(pk=msg_id).count() == 1

    _assert_queues_gap_free(HALF_TOPIC)
    assert Message.objects.filter(topic=HALF_TOPIC).count() == 5


def test_concurrent_sends_to_one_queue_get_gap_free_offsets():
    topic_create(name="OneQueue", queue_nums=1)
    per_thread = 25

    def sender(i: int) -> Callable[[], list[int]]:
        def send() -> list[int]:
            return [
                message_send(topic="OneQueue", body=f"{i}-{k}".encode()).queue_offset
                for k in range(per_thread)
            ]

        return send

    results = _run_together([sender(i) for i in range(8)])
    assert not [r for r in results if isinstance(r, BaseException)], results
    offsets = sorted(o for part in results for o in part)
    assert offsets == list(range(8 * per_thread))
    for part in results:
        assert part == sorted(part)  # each sender sees its own sends in order
    assert ConsumeQueue.objects.get(topic="OneQueue", queue_id=0).max_offset == 8 * per_thread
    _assert_queues_gap_free("OneQueue")

"""halfmoon_client's batches (api-v1 "Batches") against the real broker (pytest-django's
live_server, PostgreSQL, Redis): ``send_message_in_transaction_batch``, ``send_batch``,
``end_transactions``, the linger mode gathering the sends of many threads, and its flush at
shutdown. Requests are counted with an httpx event hook, never timed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from halfmoon_client import (
    HalfmoonAdmin,
    HalfmoonError,
    LocalTransactionState,
    Message,
    MessageView,
    SendResult,
    SimpleConsumer,
    TransactionEnd,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from halfmoon_client.batcher import Batcher

from broker.models import Message as StoredMessage
from broker.models import Transaction
from broker.services.topology.writes import access_key_create, consumer_group_create, topic_create

pytestmark = pytest.mark.django_db(transaction=True)

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW

HALF_BATCH = "/api/v1/transactions/batch"
END_BATCH = "/api/v1/transactions/end-batch"
MSG_BATCH = "/api/v1/messages/batch"
HALF_SINGLE = "/api/v1/transactions"

ANSWERS = {"commit": COMMIT, "rollback": ROLLBACK, "unknow": UNKNOW}


class BodyListener(TransactionListener):
    """The local transaction answers what the body's first word says (``commit``,
    ``rollback``, ``unknow``; ``raise`` raises); records every call."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, Any, str | None]] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:
            self.executed.append((str(msg.body), arg, msg.transaction_id))
        word = str(msg.body).split()[0]
        if word == "raise":
            raise RuntimeError("local database down")
        return ANSWERS[word]

    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        return COMMIT


class RequestCounter:
    """An httpx request hook counting ``(method, path)`` of every request sent."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> None:
        with self._lock:
            self.counts[(request.method, request.url.path)] += 1

    def posts(self, path: str) -> int:
        return self.counts[("POST", path)]


@pytest.fixture
def broker(live_server) -> dict[str, Any]:
    """Topic TranTest, producer group G (no check_url), consumer group C, an app token."""
    topic_create(name="TranTest", queue_nums=4)
    consumer_group_create(name="C", max_delivery_attempts=3)
    _, admin_token = access_key_create(name="admin", is_admin=True)
    _, app_token = access_key_create(name="app", producer_groups=["G"], consumer_groups=["C"])
    with HalfmoonAdmin(live_server.url, admin_token) as admin:
        admin.create_producer_group("G", check_url=None)
    return {"url": live_server.url, "token": app_token}


@pytest.fixture
def consumer(broker) -> SimpleConsumer:
    with SimpleConsumer(broker["url"], broker["token"], "C", "TranTest") as c:
        yield c


def make_producer(
    broker: dict[str, Any], listener: TransactionListener, counter: RequestCounter, **kwargs: Any
) -> TransactionProducer:
    """A producer of G counting its requests with ``counter``. It is never started (no
    back-check thread, so only the sends' requests are counted): shut it down after use."""
    return TransactionProducer(
        broker["url"],
        broker["token"],
        "G",
        listener,
        check_mode="poll",
        event_hooks={"request": [counter]},
        **kwargs,
    )


@contextmanager
def producing(
    broker: dict[str, Any], listener: TransactionListener, counter: RequestCounter, **kwargs: Any
) -> Iterator[TransactionProducer]:
    """``make_producer``, shut down on leaving."""
    producer = make_producer(broker, listener, counter, **kwargs)
    try:
        yield producer
    finally:
        producer.shutdown()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``predicate`` until true (a bound on a hang, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def stored_body(transaction_id: str) -> bytes:
    """The body of the half message stored for ``transaction_id``."""
    tx = Transaction.objects.get(pk=transaction_id)
    return bytes(StoredMessage.objects.get(pk=tx.half_commit_log_offset).body)


def received_bodies(consumer: SimpleConsumer) -> list[bytes]:
    received = consumer.receive(max_messages=32, invisible_duration_ms=10_000, wait_ms=2_000)
    consumer.ack(received)
    return sorted(m.body for m in received)


# --- send_message_in_transaction_batch -----------------------------------------------------------


def test_batch_send_commits_rolls_back_and_leaves_unknown_in_two_requests(broker, consumer):
    listener, counter = BodyListener(), RequestCounter()
    msgs = [Message("TranTest", body) for body in ("commit 1", "rollback 2", "unknow 3", "raise 4")]

    with producing(broker, listener, counter) as producer:
        results = producer.send_message_in_transaction_batch(msgs, arg={"order": 7})

    assert all(isinstance(r, TransactionSendResult) for r in results)
    assert [r.state for r in results] == ["COMMITTED", "ROLLED_BACK", "PREPARED", "PREPARED"]
    assert [r.local_transaction_state for r in results] == [COMMIT, ROLLBACK, UNKNOW, UNKNOW]
    assert [r.created for r in results] == [True] * 4
    assert [r.end_error for r in results] == [None] * 4
    assert isinstance(results[3].local_exception, RuntimeError)
    assert results[0].queue_id is not None and results[0].queue_offset is not None
    assert results[1].queue_offset is None
    # Each message got its own transaction, set before its local transaction ran.
    assert [m.transaction_id for m in msgs] == [r.transaction_id for r in results]
    assert listener.executed == [
        (m.body, {"order": 7}, r.transaction_id) for m, r in zip(msgs, results, strict=True)
    ]
    for msg, result in zip(msgs, results, strict=True):
        assert stored_body(result.transaction_id) == msg.body.encode()
        assert Transaction.objects.get(pk=result.transaction_id).state == result.state
    tx = Transaction.objects.get(pk=results[3].transaction_id)
    assert tx.state == "PREPARED"
    # One request for the half messages, one for the ends; none of the single endpoints.
    assert (counter.posts(HALF_BATCH), counter.posts(END_BATCH)) == (1, 1)
    assert sum(counter.counts.values()) == 2
    assert received_bodies(consumer) == [b"commit 1"]


def test_a_refused_message_gets_the_single_sends_error_and_the_others_proceed(broker, consumer):
    listener, counter = BodyListener(), RequestCounter()
    msgs = [
        Message("TranTest", "commit a"),
        Message("NoSuchTopic", "commit lost"),
        Message("TranTest", "commit b", msg_id="ORDER-1"),
        Message("TranTest", "commit b again", msg_id="ORDER-1"),
    ]

    with producing(broker, listener, counter) as producer:
        results = producer.send_message_in_transaction_batch(msgs)
        with pytest.raises(HalfmoonError) as single:
            producer.send_message_in_transaction(Message("NoSuchTopic", "commit lost"))

    refused = results[1]
    assert isinstance(refused, HalfmoonError)
    assert (
        (refused.status_code, refused.code, refused.details)
        == (
            single.value.status_code,
            single.value.code,
            single.value.details,
        )
        == (404, "topic_not_found", {"topic": "NoSuchTopic"})
    )
    ok = [results[0], results[2], results[3]]
    assert all(isinstance(r, TransactionSendResult) for r in ok)
    assert [r.state for r in ok] == ["COMMITTED"] * 3
    # The same msg_id twice: stored once, the second one answered with it (created False).
    assert (results[2].created, results[3].created) == (True, False)
    assert results[2].transaction_id == results[3].transaction_id == "ORDER-1"
    assert msgs[1].transaction_id is None
    assert [body for body, _, _ in listener.executed] == ["commit a", "commit b", "commit b again"]
    assert Transaction.objects.count() == 2
    assert received_bodies(consumer) == [b"commit a", b"commit b"]


def test_a_batch_is_sent_in_chunks_of_batch_max_messages(broker):
    counter = RequestCounter()
    msgs = [Message("TranTest", f"commit {i}") for i in range(5)]

    with producing(broker, BodyListener(), counter, batch_max_messages=2) as producer:
        results = producer.send_message_in_transaction_batch(msgs)

    assert [r.state for r in results] == ["COMMITTED"] * 5
    assert [stored_body(r.transaction_id) for r in results] == [m.body.encode() for m in msgs]
    assert (counter.posts(HALF_BATCH), counter.posts(END_BATCH)) == (3, 3)


def test_a_broker_limit_below_the_clients_splits_the_batch(broker, broker_settings):
    broker_settings["HALFMOON_BATCH_MAX_MESSAGES"] = 2
    counter = RequestCounter()
    msgs = [Message("TranTest", f"rollback {i}") for i in range(5)]

    with producing(broker, BodyListener(), counter) as producer:
        results = producer.send_message_in_transaction_batch(msgs)

    assert [r.state for r in results] == ["ROLLED_BACK"] * 5
    assert [stored_body(r.transaction_id) for r in results] == [m.body.encode() for m in msgs]
    # Refused whole (400 batch_too_large, nothing stored), then three chunks of 2, 2, 1.
    assert counter.posts(HALF_BATCH) == 1 + 3
    assert counter.posts(END_BATCH) == 1 + 3
    assert Transaction.objects.count() == 5


def test_a_batch_over_the_body_limit_is_split_until_it_fits(broker, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2_600
    counter = RequestCounter()
    msgs = [Message("TranTest", "unknow " + "x" * 1_000) for _ in range(5)]

    with producing(broker, BodyListener(), counter) as producer:
        results = producer.send_message_in_transaction_batch(msgs)

    assert [r.state for r in results] == ["PREPARED"] * 5
    assert len({r.transaction_id for r in results}) == 5
    assert Transaction.objects.count() == 5
    # 5 is refused (413), split 2 + 3; 2 fits, 3 is refused and split 1 + 2.
    assert counter.posts(HALF_BATCH) == 5


def test_a_whole_batch_refused_gives_each_message_its_own_error(broker):
    listener = BodyListener()
    producer = TransactionProducer(broker["url"], "hm_not-a-key", "G", listener)
    try:
        results = producer.send_message_in_transaction_batch(
            [Message("TranTest", "commit a"), Message("TranTest", "commit b")]
        )
    finally:
        producer.shutdown()

    assert [(r.status_code, r.code) for r in results] == [(401, "authentication_failed")] * 2
    assert results[0] is not results[1]
    assert listener.executed == []


# --- send_batch and end_transactions ------------------------------------------------------------


def test_send_batch_of_normal_messages(broker, consumer):
    counter = RequestCounter()
    msgs = [
        Message("TranTest", "one", keys=["k1"]),
        Message("NoSuchTopic", "lost"),
        Message("TranTest", b"\x00\x01"),
    ]

    with producing(broker, BodyListener(), counter) as producer:
        results = producer.send_batch(msgs)

    assert isinstance(results[0], SendResult) and isinstance(results[2], SendResult)
    assert results[0].send_status == "SEND_OK" and results[0].topic == "TranTest"
    assert isinstance(results[1], HalfmoonError)
    assert (results[1].status_code, results[1].code) == (404, "topic_not_found")
    assert counter.posts(MSG_BATCH) == 1
    assert received_bodies(consumer) == [b"\x00\x01", b"one"]


def test_end_transactions_answers_each_end(broker, consumer):
    counter = RequestCounter()
    with producing(broker, BodyListener(), counter) as producer:
        a, b = producer.send_message_in_transaction_batch(
            [Message("TranTest", "unknow a"), Message("TranTest", "unknow b")]
        )
        answers = producer.end_transactions(
            [
                TransactionEnd(a.transaction_id, COMMIT),
                TransactionEnd(b.transaction_id, ROLLBACK, remark="no stock"),
                TransactionEnd("NO-SUCH-TX", COMMIT),
                TransactionEnd(a.transaction_id, ROLLBACK),
            ]
        )

    assert answers[0]["state"] == "COMMITTED" and answers[0]["msg_id"] == a.msg_id
    assert answers[1] == {"transaction_id": b.transaction_id, "state": "ROLLED_BACK"}
    assert (answers[2].status_code, answers[2].code) == (404, "transaction_not_found")
    assert (answers[3].status_code, answers[3].code) == (409, "transaction_already_resolved")
    assert answers[3].details["state"] == "COMMITTED"
    assert counter.posts(END_BATCH) == 2
    assert received_bodies(consumer) == [b"unknow a"]


# --- linger mode ---------------------------------------------------------------------------------


def run_senders(
    producer: TransactionProducer, msgs: list[Message]
) -> tuple[list[threading.Thread], dict[int, Any]]:
    """Start one thread per message, all sending at once through
    ``send_message_in_transaction``; each records its result or exception under its index."""
    outcomes: dict[int, Any] = {}
    start = threading.Barrier(len(msgs))

    def send(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = producer.send_message_in_transaction(msgs[index], arg=index)
        except Exception as exc:  # noqa: BLE001 - asserted by the test
            outcomes[index] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(msgs))]
    for thread in threads:
        thread.start()
    return threads, outcomes


def join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)


def test_linger_gathers_the_sends_of_twenty_threads(broker, consumer):
    listener, counter = BodyListener(), RequestCounter()
    words = ["commit", "rollback", "unknow", "raise"]
    msgs = [Message("TranTest", f"{words[i % 4]} {i}") for i in range(20)]
    # The linger is far longer than the test: the batches go when they hold 20.
    producer = make_producer(
        broker, listener, counter, batch_linger_ms=60_000, batch_max_messages=20
    )

    threads, outcomes = run_senders(producer, msgs)
    join(threads)
    producer.shutdown()

    expected = {"commit": "COMMITTED", "rollback": "ROLLED_BACK"}
    for i, msg in enumerate(msgs):
        result = outcomes[i]
        assert isinstance(result, TransactionSendResult), result
        assert result.transaction_id == msg.transaction_id
        assert stored_body(result.transaction_id) == msg.body.encode()
        assert result.state == expected.get(msg.body.split()[0], "PREPARED")
        assert result.end_error is None
        assert isinstance(result.local_exception, RuntimeError) == msg.body.startswith("raise")
    assert len({outcomes[i].transaction_id for i in range(20)}) == 20
    assert sorted(arg for _, arg, _ in listener.executed) == list(range(20))
    assert (counter.posts(HALF_BATCH), counter.posts(END_BATCH)) == (1, 1)
    assert counter.posts(HALF_SINGLE) == 0
    assert received_bodies(consumer) == sorted(m.body.encode() for m in msgs[::4])


def test_linger_a_refused_caller_raises_its_own_error_and_shutdown_flushes_the_ends(broker):
    listener, counter = BodyListener(), RequestCounter()
    msgs = [
        Message("TranTest", "commit a"),
        Message("NoSuchTopic", "commit lost"),
        Message("TranTest", "rollback b"),
    ]
    producer = make_producer(
        broker, listener, counter, batch_linger_ms=60_000, batch_max_messages=3
    )

    threads, outcomes = run_senders(producer, msgs)
    # The half batch goes at 3 and the refused caller is done at once; the two ends then
    # wait for a third that never comes: shutdown sends them.
    assert wait_for(lambda: 1 in outcomes and len(listener.executed) == 2)
    assert 0 not in outcomes and 2 not in outcomes
    producer.shutdown()
    join(threads)

    assert isinstance(outcomes[1], HalfmoonError)
    assert (outcomes[1].status_code, outcomes[1].code) == (404, "topic_not_found")
    assert (outcomes[0].state, outcomes[2].state) == ("COMMITTED", "ROLLED_BACK")
    assert [body for body, _, _ in sorted(listener.executed)] == ["commit a", "rollback b"]
    assert counter.posts(HALF_BATCH) == 1
    assert counter.posts(END_BATCH) >= 1


def test_shutdown_flushes_the_queued_half_messages(broker, consumer):
    listener, counter = BodyListener(), RequestCounter()
    msgs = [Message("TranTest", f"commit {i}") for i in range(3)]
    producer = make_producer(broker, listener, counter, batch_linger_ms=60_000)

    threads, outcomes = run_senders(producer, msgs)
    with producer._linger_lock:  # every caller's half message is queued
        assert producer._linger_lock.wait_for(lambda: producer._linger_callers == 3, 30)
    assert counter.posts(HALF_BATCH) == 0
    producer.shutdown()
    join(threads)

    assert [outcomes[i].state for i in range(3)] == ["COMMITTED"] * 3
    assert counter.posts(HALF_BATCH) == 1
    assert 1 <= counter.posts(END_BATCH) <= 3
    assert received_bodies(consumer) == [m.body.encode() for m in msgs]
    with pytest.raises(RuntimeError):
        producer.send_message_in_transaction(Message("TranTest", "commit late"))


def test_linger_options_are_checked():
    with pytest.raises(ValueError):
        TransactionProducer("http://x", "t", "G", BodyListener(), batch_linger_ms=-1)
    with pytest.raises(ValueError):
        TransactionProducer("http://x", "t", "G", BodyListener(), batch_max_messages=0)


# --- Batcher (no broker) --------------------------------------------------------------------------


def test_batcher_sends_full_batches_and_flushes_the_rest_on_close():
    batches: list[list[int]] = []

    def flush(items: list[int]) -> list[int | BaseException]:
        batches.append(items)
        return [ValueError(i) if i == 4 else i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(flush, linger_s=600, max_items=3, name="test")
    futures: list[Future[int]] = [batcher.submit(i) for i in range(5)]
    assert [f.result(30) for f in futures[:3]] == [0, 10, 20]
    assert not futures[3].done()
    batcher.close()

    assert futures[3].result(0) == 30
    with pytest.raises(ValueError):
        futures[4].result(0)
    assert batches == [[0, 1, 2], [3, 4]]
    with pytest.raises(RuntimeError):
        batcher.submit(5)


def test_batcher_gives_a_failed_flush_to_every_item():
    def flush(items: list[int]) -> list[int]:
        raise ConnectionError("down")

    batcher: Batcher[int, int] = Batcher(flush, linger_s=600, max_items=2, name="test")
    futures = [batcher.submit(1), batcher.submit(2)]
    batcher.close()
    for future in futures:
        with pytest.raises(ConnectionError):
            future.result(0)

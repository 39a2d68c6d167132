"""halfmoon_client (the client package, client/) against the real broker (pytest-django's live_server, PostgreSQL, Redis).

The back-check flows call ``broker.services.checks.check_round`` directly, as a Celery worker
would, after making the transaction due.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from halfmoon_client import (
    SIGNATURE_HEADER,
    HalfmoonAdmin,
    HalfmoonConnectionError,
    HalfmoonError,
    LocalTransactionState,
    Message,
    MessageView,
    SimpleConsumer,
    TransactionListener,
    TransactionProducer,
    sign_check_body,
)

from broker.models import Transaction
from broker.rules.clock import now_ms
from broker.services.checks import check_round
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.topology.writes import access_key_create, consumer_group_create, topic_create

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


class RecordingListener(TransactionListener):
    """Answers ``execute`` for the local transaction and ``check`` for back-checks; records
    every call."""

    def __init__(self, execute: Any = UNKNOW, check: Any = COMMIT) -> None:
        self.execute = execute
        self.check = check
        self.executed: list[tuple[Message, Any]] = []
        self.checked: list[MessageView] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:
            self.executed.append((msg, arg))
        if isinstance(self.execute, BaseException):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        with self._lock:
            self.checked.append(msg_view)
        return self.check


def wait_for(predicate: Any, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.fixture
def broker(live_server) -> dict[str, Any]:
    """Topic TranTest, an admin token, and an app token for producer group G and consumer
    group C (created over HTTP by the admin client)."""
    topic_create(name="TranTest", queue_nums=4)
    consumer_group_create(name="C", max_delivery_attempts=3)
    _, admin_token = access_key_create(name="admin", is_admin=True)
    _, app_token = access_key_create(name="app", producer_groups=["G"], consumer_groups=["C"])
    admin = HalfmoonAdmin(live_server.url, admin_token)
    group = admin.create_producer_group("G", check_url=None)
    yield {
        "url": live_server.url,
        "admin": admin,
        "admin_token": admin_token,
        "token": app_token,
        "check_secret": group["check_secret"],
    }
    admin.close()


@pytest.fixture
def consumer(broker) -> SimpleConsumer:
    with SimpleConsumer(broker["url"], broker["token"], "C", "TranTest") as c:
        yield c


def make_producer(
    broker: dict[str, Any], listener: TransactionListener, **kwargs: Any
) -> TransactionProducer:
    kwargs.setdefault("check_mode", "poll")
    kwargs.setdefault("poll_wait_ms", 200)
    return TransactionProducer(broker["url"], broker["token"], "G", listener, **kwargs)


def make_due(transaction_id: str) -> int:
    """Make a PREPARED transaction due for its next back-check; return its half queue."""
    Transaction.objects.filter(pk=transaction_id).update(next_check_timestamp=0)
    return Transaction.objects.get(pk=transaction_id).half_queue_id


# --- send_message_in_transaction ----------------------------------------------------------------


def test_commit_round_trip_delivers_once_with_same_msg_id(broker, consumer):
    listener = RecordingListener(execute=COMMIT)
    msg = Message(
        "TranTest", "Hello RocketMQ 1", tags="TagB", keys=["KEY1", "order-1"], properties={"a": "b"}
    )
    with make_producer(broker, listener) as producer:
        result = producer.send_message_in_transaction(msg, arg={"order": 1})

    assert result.send_status == "SEND_OK"
    assert result.created is True
    assert result.transaction_id == result.msg_id == msg.transaction_id
    assert result.local_transaction_state is COMMIT
    assert result.state == "COMMITTED"
    assert result.queue_id is not None and result.queue_offset is not None
    assert result.end_error is None
    sent, arg = listener.executed[0]
    assert sent is msg and arg == {"order": 1}

    received = consumer.receive(max_messages=32, invisible_duration_ms=10_000, wait_ms=2_000)
    assert [m.msg_id for m in received] == [result.msg_id]
    got = received[0]
    assert got.body == b"Hello RocketMQ 1" and got.text == "Hello RocketMQ 1"
    assert (got.tags, got.keys, got.key_list) == ("TagB", "KEY1 order-1", ["KEY1", "order-1"])
    assert got.properties["a"] == "b"
    assert (got.queue_id, got.queue_offset) == (result.queue_id, result.queue_offset)
    assert got.delivery_attempt == 1 and got.receipt_handle

    assert consumer.ack(received) == (1, [])
    acked, failed = consumer.ack([got.receipt_handle])
    assert acked == 0
    assert failed == [{"receipt_handle": got.receipt_handle, "code": "invalid_receipt_handle"}]
    assert consumer.receive(wait_ms=0) == []


def test_rollback_round_trip_is_never_delivered(broker, consumer):
    with make_producer(broker, RecordingListener(execute=ROLLBACK)) as producer:
        result = producer.send_message_in_transaction(Message("TranTest", "no"))
        info = producer.get_transaction(result.transaction_id)

    assert result.state == "ROLLED_BACK"
    assert result.queue_offset is None
    assert info["state"] == "ROLLED_BACK" and info["resolved_by"] == "producer"
    assert consumer.receive(wait_ms=300) == []


def test_binary_body_round_trips_as_bytes(broker, consumer):
    body = bytes(range(256))
    with make_producer(broker, RecordingListener(execute=COMMIT)) as producer:
        result = producer.send_message_in_transaction(Message("TranTest", body))
    [got] = consumer.receive(wait_ms=2_000)
    assert got.msg_id == result.msg_id
    assert got.body == body


def test_unknow_and_exception_leave_the_transaction_prepared(broker):
    failing = RecordingListener(execute=RuntimeError("database down"))
    with make_producer(broker, failing) as producer:
        raised = producer.send_message_in_transaction(Message("TranTest", "x"))
    with make_producer(broker, RecordingListener(execute=None)) as producer:
        returned_none = producer.send_message_in_transaction(Message("TranTest", "y"))

    assert raised.local_transaction_state is UNKNOW
    assert isinstance(raised.local_exception, RuntimeError)
    assert raised.state == "PREPARED"
    assert returned_none.local_transaction_state is UNKNOW
    assert returned_none.state == "PREPARED"
    assert Transaction.objects.get(pk=raised.transaction_id).state == "PREPARED"


def test_same_msg_id_again_stores_nothing_new(broker, consumer):
    with make_producer(broker, RecordingListener(execute=COMMIT)) as producer:
        first = producer.send_message_in_transaction(Message("TranTest", "once", msg_id="order-42"))
        again = producer.send_message_in_transaction(Message("TranTest", "once", msg_id="order-42"))

    assert first.created is True and again.created is False
    assert first.transaction_id == again.transaction_id == "order-42"
    assert (first.commit_log_offset, first.half_queue_offset) == (
        again.commit_log_offset,
        again.half_queue_offset,
    )
    assert again.state == "COMMITTED" and again.end_error is None
    assert Transaction.objects.filter(pk="order-42").count() == 1
    received = consumer.receive(wait_ms=2_000)
    assert [m.msg_id for m in received] == ["order-42"]
    consumer.ack(received)
    assert consumer.receive(wait_ms=300) == []


def test_same_msg_id_from_another_group_is_a_conflict(broker):
    broker["admin"].create_producer_group("G2")
    _, token = access_key_create(name="g2", producer_groups=["G2"])
    with make_producer(broker, RecordingListener(execute=COMMIT)) as producer:
        producer.send_message_in_transaction(Message("TranTest", "x", msg_id="shared-1"))
    listener = RecordingListener(execute=COMMIT)
    other = TransactionProducer(
        broker["url"], token, "G2", listener, check_mode="poll", poll_wait_ms=200
    )
    with other, pytest.raises(HalfmoonError) as info:
        other.send_message_in_transaction(Message("TranTest", "x", msg_id="shared-1"))
    assert (info.value.status_code, info.value.code) == (409, "duplicate_msg_id")
    assert listener.executed == []


# --- errors -------------------------------------------------------------------------------------


def test_refused_half_message_raises_and_runs_no_local_transaction(broker):
    listener = RecordingListener(execute=COMMIT)
    with make_producer(broker, listener) as producer, pytest.raises(HalfmoonError) as info:
        producer.send_message_in_transaction(Message("NoSuchTopic", "x"))
    assert info.value.status_code == 404
    assert info.value.code == "topic_not_found"
    assert info.value.details == {"topic": "NoSuchTopic"}
    assert info.value.message
    assert listener.executed == []


def test_error_bodies_surface_as_halfmoon_error(broker):
    bad_key = TransactionProducer(
        broker["url"], "hm_not-a-key", "G", RecordingListener(), check_mode="poll"
    )
    with pytest.raises(HalfmoonError) as unauthenticated:
        bad_key.get_transaction("nope")
    bad_key.close()
    assert (unauthenticated.value.status_code, unauthenticated.value.code) == (
        401,
        "authentication_failed",
    )

    with make_producer(broker, RecordingListener(execute=COMMIT)) as producer:
        with pytest.raises(HalfmoonError) as unknown:
            producer.end_transaction("NO-SUCH-TX", COMMIT)
        assert (unknown.value.status_code, unknown.value.code) == (404, "transaction_not_found")

        committed = producer.send_message_in_transaction(Message("TranTest", "x"))
        with pytest.raises(HalfmoonError) as conflict:
            producer.end_transaction(committed.transaction_id, ROLLBACK)
        assert conflict.value.status_code == 409
        assert conflict.value.code == "transaction_already_resolved"
        assert conflict.value.details["state"] == "COMMITTED"
        assert "transaction_already_resolved" in str(conflict.value)

    with SimpleConsumer(broker["url"], broker["token"], "C", "TranTest") as consumer:
        with pytest.raises(HalfmoonError) as invalid:
            consumer.receive(max_messages=33)
        assert (invalid.value.status_code, invalid.value.code) == (400, "invalid_input")
        assert "max_messages" in invalid.value.details["fields"]

    with SimpleConsumer(broker["url"], broker["token"], "NotMine", "TranTest") as consumer:
        with pytest.raises(HalfmoonError) as forbidden:
            consumer.receive()
        assert forbidden.value.status_code == 403


def test_unreachable_broker_raises_connection_error():
    consumer = SimpleConsumer("http://127.0.0.1:9", "t", "C", "TranTest", timeout_s=2)
    with consumer, pytest.raises(HalfmoonConnectionError) as info:
        consumer.receive()
    assert info.value.status_code is None
    assert info.value.code == "connection_error"


# --- back-checks: serve mode --------------------------------------------------------------------


def check_body(**overrides: Any) -> dict[str, Any]:
    body = {
        "transaction_id": "TX1",
        "msg_id": "TX1",
        "producer_group": "G",
        "topic": "TranTest",
        "tags": "TagA",
        "keys": "KEY1",
        "body": "Hello",
        "properties": {},
        "check_times": 1,
        "commit_log_offset": 7,
        "half_queue_offset": 0,
        "born_timestamp": 1,
    }
    body.update(overrides)
    return body


def test_serve_mode_check_endpoint_verifies_the_signature(broker):
    listener = RecordingListener(check=ROLLBACK)
    producer = make_producer(broker, listener, check_mode="serve", check_secret="s3cret")
    with producer:
        url = producer.check_url
        assert url.startswith("http://127.0.0.1:") and url.endswith("/check")
        raw = httpx.Request("POST", url, json=check_body()).content
        good = sign_check_body("s3cret", raw)

        missing = httpx.post(url, content=raw, headers={"Content-Type": "application/json"})
        forged = httpx.post(
            url, content=raw, headers={SIGNATURE_HEADER: sign_check_body("other", raw)}
        )
        tampered = httpx.post(
            url, content=raw.replace(b"Hello", b"Hellp"), headers={SIGNATURE_HEADER: good}
        )
        for response in (missing, forged, tampered):
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "bad_signature"
        assert listener.checked == []

        answered = httpx.post(url, content=raw, headers={SIGNATURE_HEADER: good})
        assert answered.status_code == 200
        assert answered.json() == {"state": "ROLLBACK_MESSAGE"}
        [view] = listener.checked
        assert (view.transaction_id, view.check_times, view.body, view.keys) == (
            "TX1",
            1,
            b"Hello",
            "KEY1",
        )

        assert httpx.post(url.replace("/check", "/other"), content=raw).status_code == 404


def test_serve_mode_answers_the_brokers_back_check(broker, consumer):
    seen: list[tuple[int | None, LocalTransactionState]] = []
    listener = RecordingListener(execute=UNKNOW, check=COMMIT)
    producer = make_producer(
        broker,
        listener,
        check_mode="serve",
        check_secret=broker["check_secret"],
        on_check=lambda view, state: seen.append((view.check_times, state)),
    )
    with producer:
        broker["admin"].update_producer_group("G", check_url=producer.check_url)
        result = producer.send_message_in_transaction(Message("TranTest", "checked", tags="TagC"))
        assert result.state == "PREPARED"
        counts = check_round(half_queue_id=make_due(result.transaction_id))

    assert counts["delivered"] == 1 and counts["committed"] == 1
    assert seen == [(1, COMMIT)]
    [view] = listener.checked
    assert view.transaction_id == result.transaction_id
    assert (view.text, view.tags, view.producer_group) == ("checked", "TagC", "G")
    tx = Transaction.objects.get(pk=result.transaction_id)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("COMMITTED", "check", 1)
    assert [m.msg_id for m in consumer.receive(wait_ms=2_000)] == [result.transaction_id]


def test_serve_mode_with_the_wrong_secret_never_reaches_the_listener(broker):
    listener = RecordingListener(execute=UNKNOW, check=COMMIT)
    producer = make_producer(
        broker, listener, check_mode="serve", check_secret="not-the-groups-secret"
    )
    with producer:
        broker["admin"].update_producer_group("G", check_url=producer.check_url)
        result = producer.send_message_in_transaction(Message("TranTest", "x"))
        counts = check_round(half_queue_id=make_due(result.transaction_id))

    assert counts["delivered"] == 1 and counts["committed"] == 0
    assert listener.checked == []
    tx = Transaction.objects.get(pk=result.transaction_id)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)  # a 401 answer counts as UNKNOW


# --- back-checks: poll mode ---------------------------------------------------------------------


def test_poll_mode_answers_a_queued_check_through_end(broker, consumer):
    seen: list[tuple[str | None, LocalTransactionState]] = []
    listener = RecordingListener(execute=UNKNOW, check=COMMIT)
    producer = make_producer(
        broker, listener, on_check=lambda view, state: seen.append((view.transaction_id, state))
    )
    with producer:
        result = producer.send_message_in_transaction(Message("TranTest", "polled", keys="KEY9"))
        counts = check_round(half_queue_id=make_due(result.transaction_id))
        assert counts["due"] == 1 and counts["sent"] == 0  # queued for a poller, not POSTed
        assert wait_for(
            lambda: Transaction.objects.get(pk=result.transaction_id).state == "COMMITTED"
        )

    assert seen == [(result.transaction_id, COMMIT)]
    [view] = listener.checked
    assert (view.check_times, view.text, view.keys) == (1, "polled", "KEY9")
    tx = Transaction.objects.get(pk=result.transaction_id)
    assert (tx.resolved_by, tx.check_times) == ("check", 1)
    assert [m.text for m in consumer.receive(wait_ms=2_000)] == ["polled"]


def test_poll_mode_rollback_and_unknow_answers(broker):
    listener = RecordingListener(execute=UNKNOW, check=ROLLBACK)
    with make_producer(broker, listener) as producer:
        rolled = producer.send_message_in_transaction(Message("TranTest", "r"))
        check_round(half_queue_id=make_due(rolled.transaction_id))
        assert wait_for(
            lambda: Transaction.objects.get(pk=rolled.transaction_id).state == "ROLLED_BACK"
        )

        listener.check = UNKNOW
        unknown = producer.send_message_in_transaction(Message("TranTest", "u"))
        check_round(half_queue_id=make_due(unknown.transaction_id))
        assert wait_for(lambda: len(listener.checked) == 2)

    tx = Transaction.objects.get(pk=unknown.transaction_id)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)


# --- normal messages and packaging ------------------------------------------------------------


def test_normal_send_is_visible_at_once(broker, consumer):
    with make_producer(broker, RecordingListener()) as producer:
        sent = producer.send(Message("TranTest", "plain", tags="TagA", keys="K"))
    assert sent.send_status == "SEND_OK"
    [got] = consumer.receive(wait_ms=2_000)
    assert (got.msg_id, got.text, got.queue_offset) == (sent.msg_id, "plain", sent.queue_offset)


def test_a_delay_message_waits_for_its_time_and_a_recall_takes_it_back(broker, consumer):
    due = now_ms() + 3_600_000
    with make_producer(broker, RecordingListener()) as producer:
        kept = producer.send(Message("TranTest", "at its time", msg_id="D-1"), deliver_at=due)
        gone = producer.send(Message("TranTest", "recalled"), delay_level=18)
        assert (kept.state, kept.delivery_timestamp, kept.msg_id) == ("SCHEDULED", due, "D-1")
        assert kept.recall_handle and gone.recall_handle
        assert gone.delivery_timestamp >= now_ms() + 7_200_000 - 60_000  # level 18: 2 h

        recalled = producer.recall("TranTest", gone.recall_handle)
        assert (recalled["msg_id"], recalled["state"]) == (gone.msg_id, "RECALLED")
        assert producer.recall("TranTest", gone.recall_handle)["state"] == "RECALLED"
        assert consumer.receive(wait_ms=0) == []
        assert scheduled_messages_deliver(now=gone.delivery_timestamp) == 1  # the kept one
        [got] = consumer.receive(wait_ms=2_000)
        assert (got.msg_id, got.text) == ("D-1", "at its time")

        with pytest.raises(HalfmoonError) as late:
            producer.recall("TranTest", kept.recall_handle)
        assert (late.value.status_code, late.value.code) == (409, "recall_too_late")
        assert late.value.details["state"] == "DELIVERED"
        with pytest.raises(HalfmoonError) as bad:
            producer.send(Message("TranTest", "x"), delay_level=19)
        assert bad.value.code == "illegal_delay_level"
        now = producer.send(Message("TranTest", "past"), deliver_at=1)
        assert (now.state, now.recall_handle, now.delivery_timestamp) == (None, None, None)


def test_client_imports_without_django_or_the_broker():
    code = (
        "import sys, halfmoon_client, halfmoon_client.examples.seed_demo; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'broker', 'halfmoon')]; "
        "assert not bad, bad"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def test_listener_answers_are_coerced_like_rocketmq():
    assert LocalTransactionState.coerce("COMMIT_MESSAGE") is COMMIT
    assert LocalTransactionState.coerce("UNKNOWN") is UNKNOW
    assert LocalTransactionState.coerce(None) is UNKNOW
    assert LocalTransactionState.coerce(True) is UNKNOW
    assert [s.action for s in (COMMIT, ROLLBACK, UNKNOW)] == ["commit", "rollback", "unknown"]


def test_the_admin_client_creates_a_topic_with_a_message_type(broker):
    admin = broker["admin"]

    assert admin.create_topic("Plain", queue_nums=1)["message_type"] == "MIXED"
    made = admin.create_topic("Halves", queue_nums=2, message_type="TRANSACTION")

    assert (made["name"], made["queue_nums"], made["message_type"]) == ("Halves", 2, "TRANSACTION")
    assert admin.get_topic("Halves")["message_type"] == "TRANSACTION"
    with pytest.raises(HalfmoonError) as info:
        admin.create_topic("Bad", message_type="LITE")
    assert (info.value.status_code, info.value.code) == (400, "invalid_input")

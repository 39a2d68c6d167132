"""RocketMQ's official Python client (rocketmq-python-client, its code unchanged) against an
in-process gRPC server: a transactional producer sends, commits and answers a back-check over
its telemetry stream; a SimpleConsumer receives and acks; a PushConsumer consumes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

from broker.models import ClientConnection, DeliveryEvent, Transaction, TransactionEvent
from broker.models import Message as StoredMessage
from broker.rules.states import TransactionState
from broker.services.topology.writes import consumer_group_create, topic_create
from tests.support import due_at, round_for

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE_S = 30


def eventually(
    condition: Callable[[], Any], *, deadline_s: float = DEADLINE_S, what: str = ""
) -> Any:
    """``condition()``'s first truthy value, polled until ``deadline_s`` passes."""
    until = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > until:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.1)


class Checker(TransactionChecker):
    """Answers each back-check with ``resolution`` and remembers the messages checked."""

    def __init__(self, resolution: TransactionResolution) -> None:
        self.resolution = resolution
        self.checked: list[Message] = []

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message)
        return self.resolution


@pytest.fixture
def config(grpc_server) -> ClientConfiguration:
    return ClientConfiguration(f"127.0.0.1:{grpc_server.port}", Credentials())


@pytest.fixture
def topic(grpc_server) -> str:
    topic_create(name="TranTest", queue_nums=2)
    consumer_group_create(name="billing", max_delivery_attempts=3)
    return "TranTest"


@pytest.fixture
def checker() -> Checker:
    return Checker(TransactionResolution.COMMIT)


@pytest.fixture
def producer(config, topic, checker) -> Iterator[Producer]:
    producer = Producer(config, (topic,), checker)
    producer.startup()
    try:
        yield producer
    finally:
        producer.shutdown()


def message(topic: str, body: bytes, **properties: str) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    msg.tag = "tagA"
    msg.keys = "order-1"
    for key, value in properties.items():
        msg.add_property(key, value)
    return msg


def test_transactional_send_commit_then_simple_consumer_receives_and_acks(producer, config, topic):
    transaction = producer.begin_transaction()
    receipt = producer.send(message(topic, b"order 1", region="eu"), transaction)
    tx = Transaction.objects.get(pk=receipt.message_id)
    assert tx.state == TransactionState.PREPARED
    assert tx.producer_client_id == producer.client_id
    transaction.commit()
    assert Transaction.objects.get(pk=receipt.message_id).state == TransactionState.COMMITTED

    row = ClientConnection.objects.get(pk=producer.client_id)
    assert row.kind == "PRODUCER"
    assert row.producer_groups == [topic] and row.topics == [topic]
    assert row.language == "PYTHON" and row.server

    consumer = SimpleConsumer(config, "billing", {topic: FilterExpression()}, await_duration=5)
    consumer.startup()
    try:
        received = eventually(lambda: consumer.receive(32, 15), what="the committed message")
        [got] = received
        assert got.message_id == receipt.message_id
        assert got.body == b"order 1"
        assert got.tag == "tagA"
        assert got.properties.get("region") == "eu"
        assert not got.corrupted
        consumer.ack(got)
    finally:
        consumer.shutdown()
    acked = DeliveryEvent.objects.filter(msg_id=receipt.message_id, kind="acked")
    assert acked.count() == 1
    assert ClientConnection.objects.get(pk=consumer.client_id).disconnected_timestamp is not None


def test_a_back_check_reaches_the_producers_checker_over_telemetry(producer, topic, checker):
    transaction = producer.begin_transaction()
    receipt = producer.send(message(topic, b"unknown outcome"), transaction)
    tx = Transaction.objects.get(pk=receipt.message_id)

    result = round_for(tx, due_at(tx))

    [outcome] = result["outcomes"]
    assert outcome.delivered and outcome.client_id == producer.client_id
    eventually(
        lambda: Transaction.objects.get(pk=tx.pk).state == TransactionState.COMMITTED,
        what="the checker's commit",
    )
    [checked] = checker.checked
    assert checked.message_id == receipt.message_id
    assert checked.topic == topic  # the real topic, not the half topic
    assert checked.body == b"unknown outcome"
    tx.refresh_from_db()
    assert tx.resolved_by == "check"
    sent = TransactionEvent.objects.get(transaction_id=tx.pk, kind="check_sent")
    assert (sent.actor, sent.detail["client_id"]) == ("telemetry", producer.client_id)


def test_a_rollback_is_never_delivered(producer, config, topic):
    transaction = producer.begin_transaction()
    receipt = producer.send(message(topic, b"rolled back"), transaction)
    transaction.rollback()
    assert Transaction.objects.get(pk=receipt.message_id).state == TransactionState.ROLLED_BACK


class Listener(MessageListener):
    def __init__(self, result: ConsumeResult) -> None:
        self.result = result
        self.consumed: list[str] = []
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.consumed.append(message.message_id)
        return self.result


def test_a_push_consumer_consumes_and_acks_each_message_once(producer, config, topic):
    ids = []
    for n in range(3):
        receipt = producer.send(message(topic, f"normal {n}".encode()))
        ids.append(receipt.message_id)
    listener = Listener(ConsumeResult.SUCCESS)
    consumer = PushConsumer(config, "billing", listener, {topic: FilterExpression()})
    consumer.startup()
    try:
        eventually(
            lambda: DeliveryEvent.objects.filter(msg_id__in=ids, kind="acked").count() == 3,
            what="three acks",
        )
    finally:
        consumer.shutdown()
    assert sorted(listener.consumed) == sorted(ids)


def test_a_failing_push_consumer_sends_the_message_to_the_dlq_after_its_attempts(
    producer, config, topic
):
    consumer_group_create(name="failing", max_delivery_attempts=2)
    receipt = producer.send(message(topic, b"poison"))
    listener = Listener(ConsumeResult.FAILURE)
    consumer = PushConsumer(config, "failing", listener, {topic: FilterExpression()})
    consumer.startup()
    try:
        eventually(
            lambda: DeliveryEvent.objects.filter(
                msg_id=receipt.message_id, kind="dead_lettered"
            ).exists(),
            deadline_s=120,  # two nacks (1 s and 5 s backoffs), then a receive
            what="the dead letter",
        )
    finally:
        consumer.shutdown()
    assert listener.consumed == [receipt.message_id] * 2
    assert StoredMessage.objects.filter(topic="%DLQ%failing", msg_id=receipt.message_id).exists()

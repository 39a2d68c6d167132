"""The Telemetry stream through the generated stub: the settings answer each client kind needs,
the ``ClientConnection`` it records, the stream's end, and back-check commands written on it."""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.grpc.telemetry import CONSUMER_BACKOFF_S, TelemetryRegistry, TelemetryStream
from broker.models import ClientConnection, Subscription
from broker.plumbing.telemetry_bus import telemetry_commands_send, telemetry_server_id
from broker.services.topology.writes import consumer_group_create, topic_create
from tests.grpc.conftest import metadata
from tests.grpc.test_calls import half, new_id, send

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code
DEADLINE_S = 20


class Stream:
    """A client's side of a telemetry stream: ``write`` commands, ``read`` the server's."""

    def __init__(self, stub, client_id: str) -> None:
        self.outgoing: queue.Queue = queue.Queue()
        self.incoming: queue.Queue = queue.Queue()
        self.call = stub.Telemetry(self._requests(), metadata=metadata(client_id))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _requests(self) -> Iterator[spb.TelemetryCommand]:
        while True:
            command = self.outgoing.get()
            if command is None:
                return
            yield command

    def _read(self) -> None:
        try:
            for command in self.call:
                self.incoming.put(command)
        except Exception as exc:  # cancelled at the end of a test
            self.incoming.put(exc)
        self.incoming.put(None)

    def write(self, command: spb.TelemetryCommand) -> None:
        self.outgoing.put(command)

    def read(self) -> spb.TelemetryCommand | None:
        return self.incoming.get(timeout=DEADLINE_S)

    def close(self) -> None:
        self.outgoing.put(None)


@pytest.fixture
def streams(stub) -> Iterator[list[Stream]]:
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        stream.call.cancel()


def open_stream(stub, streams, client_id: str) -> Stream:
    stream = Stream(stub, client_id)
    streams.append(stream)
    return stream


def producer_settings(*topics: str, language: int = pb.Language.PYTHON) -> spb.TelemetryCommand:
    settings = pb.Settings(
        client_type=pb.ClientType.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics]),
        user_agent=pb.UA(language=language, version="5.1.2", hostname="app-1"),
    )
    settings.request_timeout.FromSeconds(3)
    return spb.TelemetryCommand(settings=settings)


def consumer_settings(
    group: str,
    topic: str,
    *,
    language: int,
    kind: int = pb.FilterType.TAG,
    expression: str = "*",
) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.ClientType.SIMPLE_CONSUMER,
            subscription=pb.Subscription(
                group=pb.Resource(name=group),
                subscriptions=[
                    pb.SubscriptionEntry(
                        topic=pb.Resource(name=topic),
                        expression=pb.FilterExpression(type=kind, expression=expression),
                    )
                ],
            ),
            user_agent=pb.UA(language=language, version="1.0.8"),
        )
    )


@pytest.fixture
def topic(grpc_server) -> str:
    topic_create(name="TranTest", queue_nums=2)
    consumer_group_create(name="billing", max_delivery_attempts=5)
    return "TranTest"


def eventually(condition, what: str = ""):
    until = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > until:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.05)


def test_a_producers_settings_are_answered_with_publishing_and_recorded(stub, streams, topic):
    stream = open_stream(stub, streams, "prod-1")
    stream.write(producer_settings(topic))
    answer = stream.read()
    assert answer.status.code == Code.OK
    assert answer.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answer.settings.publishing.validate_message_type
    assert [t.name for t in answer.settings.publishing.topics] == [topic]
    policy = answer.settings.backoff_policy
    assert policy.max_attempts == 3
    assert policy.WhichOneof("strategy") == "exponential_backoff"
    row = ClientConnection.objects.get(pk="prod-1")
    assert row.kind == "PRODUCER"
    assert row.producer_groups == [topic] and row.topics == [topic]
    assert (row.language, row.version) == ("PYTHON", "5.1.2")
    assert row.server == telemetry_server_id()
    assert row.disconnected_timestamp is None


def test_the_end_of_the_stream_disconnects_the_client(stub, streams, topic):
    stream = open_stream(stub, streams, "prod-2")
    stream.write(producer_settings(topic))
    assert stream.read().status.code == Code.OK
    stream.close()
    assert stream.read() is None  # the server ended its side too
    eventually(
        lambda: ClientConnection.objects.get(pk="prod-2").disconnected_timestamp is not None,
        "the disconnection",
    )


def test_a_python_consumer_gets_a_customized_backoff_of_its_groups_attempts(stub, streams, topic):
    stream = open_stream(stub, streams, "cons-py")
    stream.write(consumer_settings("billing", topic, language=pb.Language.PYTHON))
    answer = stream.read()
    assert answer.status.code == Code.OK
    policy = answer.settings.backoff_policy
    assert policy.max_attempts == 5
    assert policy.WhichOneof("strategy") == "customized_backoff"
    assert [d.seconds for d in policy.customized_backoff.next] == list(CONSUMER_BACKOFF_S)
    assert not answer.settings.subscription.fifo
    assert answer.settings.subscription.long_polling_timeout.seconds == 20
    row = ClientConnection.objects.get(pk="cons-py")
    assert (row.kind, row.consumer_group, row.topics) == ("SIMPLE_CONSUMER", "billing", [topic])


def test_a_node_consumer_gets_an_exponential_backoff(stub, streams, topic):
    stream = open_stream(stub, streams, "cons-node")
    stream.write(consumer_settings("billing", topic, language=pb.Language.NODE_JS))
    policy = stream.read().settings.backoff_policy
    assert policy.max_attempts == 5
    assert policy.WhichOneof("strategy") == "exponential_backoff"
    assert policy.exponential_backoff.initial.seconds == 1


def test_settings_of_an_unknown_consumer_group_are_refused(stub, streams, topic):
    stream = open_stream(stub, streams, "cons-x")
    stream.write(consumer_settings("nobody", topic, language=pb.Language.PYTHON))
    answer = stream.read()
    assert answer.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    assert not answer.HasField("settings")


def test_a_consumers_subscriptions_are_recorded(stub, streams, topic):
    stream = open_stream(stub, streams, "cons-sql")
    stream.write(
        consumer_settings(
            "billing",
            topic,
            language=pb.Language.PYTHON,
            kind=pb.FilterType.SQL,
            expression="a > 5",
        )
    )
    assert stream.read().status.code == Code.OK
    row = Subscription.objects.get(consumer_group="billing", topic=topic)
    assert (row.expression_type, row.expression) == ("SQL92", "a > 5")


def test_settings_with_a_malformed_sql92_subscription_are_refused(stub, streams, topic):
    stream = open_stream(stub, streams, "cons-bad")
    stream.write(
        consumer_settings(
            "billing", topic, language=pb.Language.PYTHON, kind=pb.FilterType.SQL, expression="a >"
        )
    )
    answer = stream.read()
    assert answer.status.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert "position 4" in answer.status.message
    assert not Subscription.objects.exists()
    assert not ClientConnection.objects.filter(pk="cons-bad").exists()


def test_a_stream_without_client_id_is_refused(stub, grpc_server):
    call = stub.Telemetry(iter([producer_settings("t")]), metadata=[("x-mq-language", "PYTHON")])
    [answer] = list(call)
    assert answer.status.code == Code.CLIENT_ID_REQUIRED


def test_a_back_check_is_written_on_the_senders_stream(stub, streams, topic):
    stream = open_stream(stub, streams, "prod-3")
    stream.write(producer_settings(topic))
    assert stream.read().status.code == Code.OK
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id, body=b"check me"), client_id="prod-3")
    from broker.models import Transaction

    tx = Transaction.objects.get(pk=msg_id)
    command = {
        "type": "recover_orphaned_transaction",
        "client_id": "prod-3",
        "transaction_id": msg_id,
        "commit_log_offset": tx.half_commit_log_offset,
        "check_times": 1,
    }
    assert telemetry_commands_send([(telemetry_server_id(), command)], timeout_s=10) == ["written"]
    written = stream.read().recover_orphaned_transaction_command
    assert written.transaction_id == msg_id
    message = written.message
    assert message.topic.name == topic
    assert message.system_properties.message_id == msg_id
    assert message.body == b"check me"
    assert (
        message.system_properties.body_digest.checksum
        == hashlib.md5(b"check me").hexdigest().upper()
    )
    assert message.system_properties.message_type == pb.MessageType.TRANSACTION

    other = {**command, "client_id": "not-here"}
    assert telemetry_commands_send([(telemetry_server_id(), other)], timeout_s=10) == ["gone"]


def test_the_registry_refuses_a_command_when_the_outbox_is_full(monkeypatch):
    import asyncio

    import broker.grpc.telemetry as telemetry

    monkeypatch.setattr(telemetry, "OUTBOX_MAX", 2)

    async def scenario() -> list[bool]:
        stream = TelemetryStream("c")
        registry = TelemetryRegistry(in_thread=None)  # type: ignore[arg-type]
        registry.register(stream)
        assert registry.stream_of("c") is stream
        results = [stream.put(spb.TelemetryCommand()) for _ in range(3)]
        stream.end()  # ending is never refused
        assert registry.unregister(stream)
        assert registry.stream_of("c") is None
        return results

    assert asyncio.run(scenario()) == [True, True, False]

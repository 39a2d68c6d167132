"""Topic message types over gRPC: QueryRoute's ``accept_message_types`` is the topic's
``message_type`` (all four for MIXED); a SendMessage of another type is
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE with nothing stored (RocketMQ's proxy); the official Python
client refuses such a send itself from the route, and gets the server's refusal when its route
is older than a change of the topic's type."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.v5.exception import BadRequestException, IllegalArgumentException

from broker.models import Message as StoredMessage
from broker.models import ScheduledMessage, Transaction
from broker.rules.clock import now_ms
from broker.services.topology.writes import topic_create, topic_update
from tests.grpc.conftest import metadata
from tests.grpc.test_calls import half, normal, send
from tests.grpc.test_delay import delay

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code
T = pb.MessageType
HOUR = 3_600_000


def route_types(stub, topic: str) -> list[list[int]]:
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=metadata()
    )
    assert answer.status.code == Code.OK
    return [list(q.accept_message_types) for q in answer.message_queues]


@pytest.mark.parametrize(
    ("message_type", "accepted"),
    [
        ("MIXED", [T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION]),
        ("NORMAL", [T.NORMAL]),
        ("FIFO", [T.FIFO]),
        ("DELAY", [T.DELAY]),
        ("TRANSACTION", [T.TRANSACTION]),
    ],
)
def test_every_queue_of_the_route_accepts_the_topics_types(
    stub, grpc_server, message_type, accepted
):
    topic_create(name="orders", queue_nums=3, message_type=message_type)

    assert route_types(stub, "orders") == [accepted] * 3


def test_the_route_follows_a_change_of_type(stub, grpc_server):
    topic_create(name="orders", queue_nums=1, message_type="NORMAL")
    assert route_types(stub, "orders") == [[T.NORMAL]]

    topic_update(name="orders", message_type="DELAY")

    assert route_types(stub, "orders") == [[T.DELAY]]


def _stored() -> tuple[int, int, int]:
    return (
        StoredMessage.objects.count(),
        ScheduledMessage.objects.count(),
        Transaction.objects.count(),
    )


@pytest.mark.parametrize(
    ("topic_type", "build", "sent_type"),
    [
        ("TRANSACTION", lambda t: normal(t), "NORMAL"),
        ("DELAY", lambda t: normal(t), "NORMAL"),
        ("NORMAL", lambda t: half(t), "TRANSACTION"),
        ("DELAY", lambda t: half(t), "TRANSACTION"),
        ("NORMAL", lambda t: delay(t, now_ms() + HOUR), "DELAY"),
        ("TRANSACTION", lambda t: delay(t, now_ms() - 1000), "DELAY"),  # due: still DELAY
    ],
)
def test_a_send_the_topic_does_not_accept_is_refused_as_rocketmqs_proxy_does(
    stub, grpc_server, topic_type, build, sent_type
):
    topic_create(name="orders", queue_nums=2, message_type=topic_type)
    before = _stored()

    answer = send(stub, build("orders"))

    assert answer.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert answer.entries[0].status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert f"accepts {topic_type} messages, not a {sent_type} message" in answer.status.message
    assert _stored() == before


@pytest.mark.parametrize(
    ("topic_type", "build"),
    [
        ("NORMAL", lambda t: normal(t)),
        ("TRANSACTION", lambda t: half(t)),
        ("DELAY", lambda t: delay(t, now_ms() + HOUR)),
        ("MIXED", lambda t: delay(t, now_ms() + HOUR)),
    ],
)
def test_a_send_of_the_topics_type_is_stored(stub, grpc_server, topic_type, build):
    topic_create(name="orders", queue_nums=2, message_type=topic_type)
    before = _stored()

    answer = send(stub, build("orders"))

    assert answer.status.code == Code.OK
    assert _stored() != before


# --- The official Python client ------------------------------------------------------------


@pytest.fixture
def config(grpc_server) -> ClientConfiguration:
    return ClientConfiguration(f"127.0.0.1:{grpc_server.port}", Credentials())


@pytest.fixture
def producer(config) -> Iterator[Producer]:
    producer = Producer(config, ("orders",))
    yield producer
    producer.shutdown()


def message(body: bytes, delivery_timestamp: int | None = None) -> Message:
    msg = Message()
    msg.topic = "orders"
    msg.body = body
    if delivery_timestamp is not None:
        msg.delivery_timestamp = delivery_timestamp
    return msg


def test_the_official_client_refuses_a_type_its_route_does_not_accept(producer, grpc_server):
    topic_create(name="orders", queue_nums=2, message_type="TRANSACTION")
    producer.startup()

    with pytest.raises(IllegalArgumentException, match="not match with queue accept message"):
        producer.send(message(b"normal"))
    with pytest.raises(IllegalArgumentException, match="not match with queue accept message"):
        producer.send(message(b"later", delivery_timestamp=now_ms() + HOUR))

    assert _stored() == (0, 0, 0)


def test_the_official_client_sends_the_type_its_topic_accepts(producer, grpc_server):
    topic_create(name="orders", queue_nums=2, message_type="DELAY")
    producer.startup()

    receipt = producer.send(message(b"later", delivery_timestamp=now_ms() + HOUR))

    assert ScheduledMessage.objects.get(msg_id=receipt.message_id).topic == "orders"
    with pytest.raises(IllegalArgumentException):
        producer.send(message(b"normal"))


def test_the_server_refuses_a_send_made_on_a_route_older_than_the_types_change(
    producer, grpc_server
):
    topic_create(name="orders", queue_nums=2)  # MIXED: the client's route accepts all
    producer.startup()
    assert producer.send(message(b"before")).message_id

    topic_update(name="orders", message_type="TRANSACTION")  # the route is kept 30 s

    with pytest.raises(BadRequestException) as caught:
        producer.send(message(b"after"))
    assert caught.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert StoredMessage.objects.filter(topic="orders").count() == 1

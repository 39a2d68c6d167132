"""FIFO messages over gRPC, through the generated stub against an in-process server
(``conftest.grpc_server``): a FIFO send is stored with its message group in the group's queue
and read back as FIFO with it; a FIFO message without a valid group, or a group on another type,
is refused with RocketMQ's codes; a FIFO consumer group's settings answer ``subscription.fifo``
and its receives hand out each group's head only, the next after the ack or the forward to the
DLQ."""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.models import Message
from broker.plumbing.wakeups import topic_channel
from broker.rules.fifo import message_group_queue
from broker.services.topology.writes import consumer_group_create, topic_create
from tests.grpc.conftest import metadata
from tests.grpc.test_calls import normal, on_server_loop, receive, send
from tests.grpc.test_telemetry import consumer_settings, open_stream, streams  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code


@pytest.fixture
def topic(grpc_server) -> str:
    topic_create(name="orders", queue_nums=4)
    consumer_group_create(name="billing", max_delivery_attempts=5)
    consumer_group_create(name="ordered", max_delivery_attempts=3, fifo=True)
    return "orders"


def fifo(topic: str, group: str | None, body: bytes = b"step") -> pb.Message:
    message = normal(topic, body=body)
    message.system_properties.message_type = pb.MessageType.FIFO
    if group is not None:
        message.system_properties.message_group = group
    return message


def messages_of(answers) -> list[pb.Message]:
    return [a.message for a in answers if a.WhichOneof("content") == "message"]


def ack(stub, group: str, topic: str, *messages: pb.Message) -> spb.AckMessageResponse:
    return stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[
                spb.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle,
                )
                for m in messages
            ],
        ),
        metadata=metadata(),
    )


def test_a_fifo_message_is_stored_in_its_groups_queue_and_read_back_as_fifo(stub, topic):
    answer = send(stub, *(fifo(topic, "order-7", body=f"step {i}".encode()) for i in range(3)))
    assert answer.status.code == Code.OK
    stored = list(Message.objects.filter(topic=topic).order_by("commit_log_offset"))
    assert {m.queue_id for m in stored} == {message_group_queue("order-7", 4)}
    assert {m.message_group for m in stored} == {"order-7"}
    assert [bytes(m.body) for m in sorted(stored, key=lambda m: m.queue_offset)] == [
        b"step 0",
        b"step 1",
        b"step 2",
    ]  # one request's FIFO messages in its order
    [got] = messages_of(receive(stub, "billing", topic))[:1]
    assert got.system_properties.message_type == pb.MessageType.FIFO
    assert got.system_properties.message_group == "order-7"


@pytest.mark.parametrize("group", [None, "", " ", "x" * 65, "a\tb"])
def test_a_fifo_message_without_a_valid_group_is_illegal(stub, topic, group):
    answer = send(stub, fifo(topic, group))
    assert answer.status.code == Code.ILLEGAL_MESSAGE_GROUP
    assert not Message.objects.filter(topic=topic).exists()


@pytest.mark.parametrize("kind", [pb.MessageType.NORMAL, pb.MessageType.DELAY])
def test_a_message_group_on_another_type_conflicts(stub, topic, kind):
    message = fifo(topic, "g")
    message.system_properties.message_type = kind
    if kind == pb.MessageType.DELAY:
        message.system_properties.delivery_timestamp.FromMilliseconds(4_000_000_000_000)
    answer = send(stub, message)
    assert answer.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_fifo_message_with_a_delivery_time_conflicts(stub, topic):
    message = fifo(topic, "g")
    message.system_properties.delivery_timestamp.FromMilliseconds(4_000_000_000_000)
    assert send(stub, message).status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_priority_messages_are_still_not_served(stub, topic):
    message = normal(topic)
    message.system_properties.message_type = pb.MessageType.PRIORITY
    answer = send(stub, message)
    assert answer.status.code == Code.BAD_REQUEST
    assert "PRIORITY" in answer.status.message


def test_the_route_accepts_fifo(stub, topic):
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=metadata()
    )
    assert all(pb.MessageType.FIFO in q.accept_message_types for q in answer.message_queues)


def test_a_fifo_groups_settings_answer_fifo(stub, streams, topic):  # noqa: F811
    stream = open_stream(stub, streams, "cons-fifo")
    stream.write(consumer_settings("ordered", topic, language=pb.Language.PYTHON))
    assert stream.read().settings.subscription.fifo
    other = open_stream(stub, streams, "cons-plain")
    other.write(consumer_settings("billing", topic, language=pb.Language.PYTHON))
    assert not other.read().settings.subscription.fifo


def test_a_fifo_group_receives_each_groups_head_then_the_next_after_the_ack(stub, topic):
    for i in range(3):
        send(stub, fifo(topic, "a", body=f"a{i}".encode()), fifo(topic, "b", body=f"b{i}".encode()))
    first = messages_of(receive(stub, "ordered", topic))
    assert sorted(m.body for m in first) == [b"a0", b"b0"]
    assert all(m.system_properties.message_type == pb.MessageType.FIFO for m in first)
    assert receive(stub, "ordered", topic)[0].status.code == Code.MESSAGE_NOT_FOUND
    [a0] = [m for m in first if m.body == b"a0"]
    assert ack(stub, "ordered", topic, a0).status.code == Code.OK
    assert [m.body for m in messages_of(receive(stub, "ordered", topic))] == [b"a1"]
    [b0] = [m for m in first if m.body == b"b0"]
    forwarded = stub.ForwardMessageToDeadLetterQueue(
        spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="ordered"),
            topic=pb.Resource(name=topic),
            receipt_handle=b0.system_properties.receipt_handle,
            message_id=b0.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=3,
        ),
        metadata=metadata(),
    )
    assert forwarded.status.code == Code.OK
    assert [m.body for m in messages_of(receive(stub, "ordered", topic))] == [b"b1"]


def test_an_ack_wakes_a_waiting_fifo_receive(stub, topic, grpc_server):
    send(stub, fifo(topic, "a", body=b"a0"), fifo(topic, "a", body=b"a1"))
    [a0] = messages_of(receive(stub, "ordered", topic))
    result: list = []
    waiting = threading.Thread(
        target=lambda: result.extend(receive(stub, "ordered", topic, wait_s=20, timeout=25))
    )
    waiting.start()
    deadline = time.monotonic() + 20
    while not on_server_loop(
        grpc_server, lambda hub: hub.waiting() == 1 and hub.subscribed.is_set()
    ):
        assert time.monotonic() < deadline and waiting.is_alive(), "the receive never waited"
        time.sleep(0.02)
    seen = on_server_loop(grpc_server, lambda hub: hub.generation(topic_channel(topic)))
    assert ack(stub, "ordered", topic, a0).status.code == Code.OK
    waiting.join(25)
    assert [m.body for m in messages_of(result)] == [b"a1"]
    # Woken by the ack's wake-up, not by the 5 s re-check.
    after = on_server_loop(grpc_server, lambda hub: hub.generation(topic_channel(topic)))
    assert after != seen, (seen, after)

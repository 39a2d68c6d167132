"""DELAY messages and RecallMessage over gRPC, through the generated stub against an in-process
server (``conftest.grpc_server``): a DELAY send waits on RMQ_SYS_WHEEL_TIMER and answers a
recall handle; the Python client's milliseconds in ``Timestamp.seconds`` are read as such; a
time too far ahead, or a type and a delivery time that disagree, are refused with RocketMQ's
codes; a recall before the time takes the message back, after it is refused; a delivered delay
message reaches consumers as DELAY with its delivery timestamp."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.constants import PROPERTY_TIMER_DELIVER_MS, TIMER_TOPIC
from broker.models import Message, ScheduledMessage
from broker.rules.clock import now_ms
from broker.rules.timers import RecallHandle, recall_handle_format, recall_handle_parse
from broker.services.access.secrets import access_key_secret_set
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.topology.writes import (
    access_key_create,
    consumer_group_create,
    producer_group_create,
    topic_create,
)
from tests.grpc.conftest import metadata
from tests.grpc.test_calls import half, new_id, normal, receive, send
from tests.grpc.test_signatures import signed

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code
HOUR = 3_600_000


@pytest.fixture
def topic(grpc_server) -> str:
    topic_create(name="orders", queue_nums=2)
    return "orders"


@pytest.fixture
def group(topic) -> str:
    consumer_group_create(name="billing")
    return "billing"


def stamp(ms: int) -> Timestamp:
    value = Timestamp()
    value.FromMilliseconds(ms)
    return value


def delay(topic: str, due: int | Timestamp | None, msg_id: str | None = None) -> pb.Message:
    """A DELAY message due at ``due`` (ms, or a Timestamp as sent; None: no delivery time)."""
    message = normal(topic, body=b"cancel order 7", msg_id=msg_id)
    message.system_properties.message_type = pb.MessageType.DELAY
    if due is not None:
        message.system_properties.delivery_timestamp.CopyFrom(
            due if isinstance(due, Timestamp) else stamp(due)
        )
    return message


def recall(stub, topic: str, handle: str, client_id: str = "client-1", md=None):
    return stub.RecallMessage(
        spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle),
        metadata=md or metadata(client_id),
    )


# --- SendMessage -------------------------------------------------------------------------------


def test_a_delay_message_waits_on_the_timer_topic_and_answers_a_recall_handle(stub, topic, group):
    msg_id, due = new_id(), now_ms() + HOUR
    answer = send(stub, delay(topic, due, msg_id=msg_id))

    assert answer.status.code == Code.OK, answer.status
    entry = answer.entries[0]
    assert entry.message_id == msg_id
    row = ScheduledMessage.objects.get(msg_id=msg_id)
    assert (row.topic, row.delivery_timestamp, row.state) == (topic, due, "SCHEDULED")
    waiting = Message.objects.get(pk=row.commit_log_offset)
    assert waiting.topic == TIMER_TOPIC
    assert entry.offset == waiting.queue_offset
    assert recall_handle_parse(entry.recall_handle) == RecallHandle(topic, "halfmoon", due, msg_id)
    assert [p.status.code for p in receive(stub, group, topic)] == [Code.MESSAGE_NOT_FOUND]


def test_a_resent_delay_message_is_scheduled_once(stub, topic):
    msg_id, due = new_id(), now_ms() + HOUR
    first = send(stub, delay(topic, due, msg_id=msg_id))
    again = send(stub, delay(topic, due, msg_id=msg_id))
    assert first.entries[0] == again.entries[0]
    assert ScheduledMessage.objects.filter(msg_id=msg_id).count() == 1


def test_the_python_clients_milliseconds_in_seconds_are_read_as_milliseconds(stub, topic):
    msg_id, due = new_id(), now_ms() + 60_000
    # rocketmq-python-client 5.1.2 writes its ms delivery_timestamp into Timestamp.seconds.
    answer = send(stub, delay(topic, Timestamp(seconds=due), msg_id=msg_id))
    assert answer.status.code == Code.OK, answer.status
    assert ScheduledMessage.objects.get(msg_id=msg_id).delivery_timestamp == due
    whole_seconds = now_ms() // 1000 + 60
    send(stub, delay(topic, Timestamp(seconds=whole_seconds), msg_id=(other := new_id())))
    assert ScheduledMessage.objects.get(msg_id=other).delivery_timestamp == whole_seconds * 1000


def test_a_past_delivery_time_is_a_normal_message_without_recall_handle(stub, topic, group):
    msg_id = new_id()
    answer = send(stub, delay(topic, now_ms() - 5000, msg_id=msg_id))
    assert answer.status.code == Code.OK
    assert answer.entries[0].recall_handle == ""
    assert not ScheduledMessage.objects.exists()
    messages = [p.message for p in receive(stub, group, topic) if p.HasField("message")]
    assert [m.system_properties.message_id for m in messages] == [msg_id]


def test_a_delivery_time_beyond_the_maximum_delay_is_illegal(stub, topic, grpc_settings):
    grpc_settings.HALFMOON_SETTINGS = {
        **grpc_settings.HALFMOON_SETTINGS,
        "HALFMOON_TIMER_MAX_DELAY_SEC": 60,
    }
    answer = send(stub, delay(topic, now_ms() + 70_000))
    assert answer.status.code == Code.ILLEGAL_DELIVERY_TIME
    assert "at most 60 s" in answer.status.message
    assert answer.entries[0].status.code == Code.ILLEGAL_DELIVERY_TIME
    assert not Message.objects.exists()


def test_a_type_and_a_delivery_time_that_disagree_conflict(stub, topic):
    untimed = send(stub, delay(topic, None))
    assert untimed.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "delivery_timestamp" in untimed.status.message
    timed_normal = normal(topic)
    timed_normal.system_properties.delivery_timestamp.CopyFrom(stamp(now_ms() + HOUR))
    assert send(stub, timed_normal).status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    timed_half = half(topic, delivery_timestamp=stamp(now_ms() + HOUR))
    assert send(stub, timed_half).status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert not Message.objects.exists()


# --- RecallMessage -----------------------------------------------------------------------------


def test_a_recall_before_the_time_takes_the_message_back(stub, topic, group):
    msg_id, due = new_id(), now_ms() + HOUR
    handle = send(stub, delay(topic, due, msg_id=msg_id)).entries[0].recall_handle

    answer = recall(stub, topic, handle, client_id="client-7")

    assert answer.status.code == Code.OK, answer.status
    assert answer.message_id == msg_id
    row = ScheduledMessage.objects.get(msg_id=msg_id)
    assert (row.state, row.recalled_by) == ("RECALLED", "grpc:client-7")
    assert recall(stub, topic, handle).status.code == Code.OK  # again: unchanged
    assert scheduled_messages_deliver(now=due + 1) == 0
    assert [p.status.code for p in receive(stub, group, topic)] == [Code.MESSAGE_NOT_FOUND]


def test_a_recall_after_delivery_is_too_late(stub, topic):
    msg_id, due = new_id(), now_ms() + HOUR
    handle = send(stub, delay(topic, due, msg_id=msg_id)).entries[0].recall_handle
    assert scheduled_messages_deliver(now=due) == 1

    answer = recall(stub, topic, handle)

    assert answer.status.code == Code.PRECONDITION_FAILED
    assert "too late" in answer.status.message
    assert ScheduledMessage.objects.get(msg_id=msg_id).state == "DELIVERED"


def test_a_bad_recall_handle_is_a_bad_request_and_an_unknown_message_not_found(stub, topic):
    handle = send(stub, delay(topic, now_ms() + HOUR)).entries[0].recall_handle
    assert recall(stub, topic, "not-a-handle").status.code == Code.BAD_REQUEST
    topic_create(name="payments", queue_nums=1)
    other_topic = recall(stub, "payments", handle)
    assert other_topic.status.code == Code.BAD_REQUEST
    assert "orders" in other_topic.status.message
    unknown = recall_handle_format(RecallHandle(topic, "halfmoon", now_ms() + HOUR, new_id()))
    assert recall(stub, topic, unknown).status.code == Code.NOT_FOUND


def test_only_a_key_of_the_messages_group_may_recall_it(stub, topic, grpc_settings):
    grpc_settings.HALFMOON_GRPC_ALLOW_ANONYMOUS = False
    producer_group_create(name="G", check_url=None)
    producer_group_create(name="H", check_url=None)
    access_key_create(name="orders-app", producer_groups=["G"])
    access_key_create(name="other-app", producer_groups=["H"])
    owner = signed("orders-app", access_key_secret_set(name="orders-app"))
    outsider = signed("other-app", access_key_secret_set(name="other-app"))
    msg_id = new_id()
    sent = stub.SendMessage(
        spb.SendMessageRequest(messages=[delay(topic, now_ms() + HOUR, msg_id=msg_id)]),
        metadata=owner,
    )
    assert ScheduledMessage.objects.get(msg_id=msg_id).producer_group == "G"
    handle = sent.entries[0].recall_handle

    assert recall(stub, topic, handle, md=outsider).status.code == Code.FORBIDDEN
    assert ScheduledMessage.objects.get(msg_id=msg_id).state == "SCHEDULED"
    assert recall(stub, topic, handle, md=owner).status.code == Code.OK


# --- ReceiveMessage ----------------------------------------------------------------------------


def test_a_delivered_delay_message_is_received_as_delay_with_its_delivery_time(stub, topic, group):
    msg_id, due = new_id(), now_ms() + HOUR
    send(stub, delay(topic, due, msg_id=msg_id))
    assert scheduled_messages_deliver(now=due) == 1

    parts = receive(stub, group, topic)

    messages = [p.message for p in parts if p.HasField("message")]
    assert [m.system_properties.message_id for m in messages] == [msg_id]
    system = messages[0].system_properties
    assert system.message_type == pb.MessageType.DELAY
    assert system.delivery_timestamp.ToMilliseconds() == due
    assert system.store_timestamp.ToMilliseconds() == due
    assert messages[0].body == b"cancel order 7"
    assert PROPERTY_TIMER_DELIVER_MS not in messages[0].user_properties

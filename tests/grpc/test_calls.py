"""Each MessagingService call's contract, through the generated stub against an in-process
server (``conftest.grpc_server``)."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid

import grpc
import pytest
from django.db import InterfaceError, OperationalError
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.models import (
    ClientConnection,
    Message,
    ProducerGroup,
    Resolution,
    Transaction,
)
from broker.plumbing.wakeup_listeners import wakeup_hub
from broker.plumbing.wakeups import topic_channel
from broker.rules.states import TransactionState
from broker.services.commitlog.messages import message_send
from broker.services.topology.writes import access_key_create, consumer_group_create, topic_create
from tests.grpc.conftest import metadata

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code


def new_id() -> str:
    """A message id as a RocketMQ 5 client makes one (34 upper-case hex characters)."""
    return ("01" + uuid.uuid4().hex + "AB").upper()[:34]


def half(
    topic: str, body: bytes = b"hello", msg_id: str | None = None, **system: object
) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        user_properties={"k": "v"},
        system_properties=pb.SystemProperties(
            message_id=msg_id if msg_id is not None else new_id(),
            message_type=pb.MessageType.TRANSACTION,
            tag="tagA",
            keys=["key1", "key2"],
            body_encoding=pb.Encoding.IDENTITY,
            **system,
        ),
    )


def normal(topic: str, body: bytes = b"plain", msg_id: str | None = None) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=msg_id if msg_id is not None else new_id(),
            message_type=pb.MessageType.NORMAL,
        ),
    )


def seconds(s: float) -> Duration:
    d = Duration()
    d.FromMilliseconds(int(s * 1000))
    return d


def receive(
    stub, group: str, topic: str, *, wait_s: float = 0, invisible_s: float = 30, timeout: float = 10
):
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        invisible_duration=seconds(invisible_s),
        long_polling_timeout=seconds(wait_s),
    )
    return list(stub.ReceiveMessage(request, metadata=metadata(), timeout=timeout))


@pytest.fixture
def topic(grpc_server) -> str:
    topic_create(name="orders", queue_nums=4)
    return "orders"


@pytest.fixture
def group(topic) -> str:
    consumer_group_create(name="billing", max_delivery_attempts=3)
    return "billing"


# --- QueryRoute ------------------------------------------------------------------------------


def test_route_names_every_queue_of_the_topic_on_the_servers_endpoint(stub, topic, grpc_server):
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=metadata()
    )
    assert answer.status.code == Code.OK
    assert [q.id for q in answer.message_queues] == [0, 1, 2, 3]
    queue = answer.message_queues[0]
    assert queue.broker.name == "halfmoon"
    assert queue.broker.id == 0
    assert queue.permission == pb.Permission.READ_WRITE
    assert list(queue.accept_message_types) == [  # a MIXED topic (created without a type)
        pb.MessageType.NORMAL,
        pb.MessageType.FIFO,
        pb.MessageType.DELAY,
        pb.MessageType.TRANSACTION,
    ]
    address = queue.broker.endpoints.addresses[0]
    assert queue.broker.endpoints.scheme == pb.AddressScheme.IPv4
    assert (address.host, address.port) == ("127.0.0.1", grpc_server.port)


def test_route_of_an_unknown_topic_is_topic_not_found(stub, grpc_server):
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="nope")), metadata=metadata()
    )
    assert answer.status.code == Code.TOPIC_NOT_FOUND
    assert "nope" in answer.status.message


def test_route_of_a_system_topic_is_forbidden(stub, grpc_server):
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="RMQ_SYS_TRANS_HALF_TOPIC")),
        metadata=metadata(),
    )
    assert answer.status.code == Code.FORBIDDEN


def test_a_namespace_is_refused(stub, topic):
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic, resource_namespace="ns1")),
        metadata=metadata(),
    )
    assert answer.status.code == Code.BAD_REQUEST
    assert "namespace" in answer.status.message


def test_route_endpoint_follows_the_setting(stub, topic, grpc_server, grpc_settings):
    from broker.grpc.convert import endpoints_of

    endpoints = endpoints_of("broker.example.com:9876")
    assert endpoints.scheme == pb.AddressScheme.DOMAIN_NAME
    assert (endpoints.addresses[0].host, endpoints.addresses[0].port) == (
        "broker.example.com",
        9876,
    )
    assert endpoints_of("[::1]:8081").scheme == pb.AddressScheme.IPv6


# --- SendMessage and EndTransaction ------------------------------------------------------------


def send(stub, *messages: pb.Message, client_id: str = "client-1") -> spb.SendMessageResponse:
    return stub.SendMessage(
        spb.SendMessageRequest(messages=list(messages)), metadata=metadata(client_id)
    )


def test_half_message_keeps_the_clients_id_and_its_group_is_the_topics(stub, topic):
    msg_id = new_id()
    answer = send(stub, half(topic, msg_id=msg_id))
    assert answer.status.code == Code.OK
    assert len(answer.entries) == 1
    assert answer.entries[0].message_id == msg_id
    assert answer.entries[0].transaction_id == msg_id
    tx = Transaction.objects.get(pk=msg_id)
    assert tx.producer_group == topic  # created on first use, named after the topic
    assert tx.producer_client_id == "client-1"
    assert tx.state == TransactionState.PREPARED
    assert ProducerGroup.objects.get(name=topic).check_url is None
    stored = Message.objects.get(msg_id=msg_id)
    assert bytes(stored.body) == b"hello"
    assert stored.tags == "tagA"
    assert stored.keys == "key1 key2"
    assert stored.properties["k"] == "v"


def test_a_retried_half_message_is_stored_once(stub, topic):
    msg_id = new_id()
    assert send(stub, half(topic, msg_id=msg_id)).status.code == Code.OK
    again = send(stub, half(topic, msg_id=msg_id))
    assert again.status.code == Code.OK
    assert again.entries[0].transaction_id == msg_id
    assert Message.objects.filter(msg_id=msg_id).count() == 1


def test_a_retried_normal_message_is_stored_once(stub, topic):
    msg_id = new_id()
    first = send(stub, normal(topic, msg_id=msg_id))
    second = send(stub, normal(topic, msg_id=msg_id))
    assert first.status.code == second.status.code == Code.OK
    assert first.entries[0].offset == second.entries[0].offset
    assert Message.objects.filter(msg_id=msg_id).count() == 1


def test_a_blank_message_id_is_illegal(stub, topic):
    answer = send(stub, half(topic, msg_id=""))
    assert answer.status.code == Code.ILLEGAL_MESSAGE_ID
    assert answer.entries[0].status.code == Code.ILLEGAL_MESSAGE_ID
    assert not Transaction.objects.exists()


def test_a_body_over_the_limit_is_too_large(stub, topic, grpc_settings):
    grpc_settings.HALFMOON_SETTINGS = {
        **grpc_settings.HALFMOON_SETTINGS,
        "HALFMOON_MAX_MESSAGE_SIZE": 10,
    }
    answer = send(stub, half(topic, body=b"x" * 11))
    assert answer.status.code == Code.MESSAGE_BODY_TOO_LARGE


def test_check_immunity_comes_from_the_recovery_duration(stub, topic):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id, orphaned_transaction_recovery_duration=seconds(120)))
    tx = Transaction.objects.get(pk=msg_id)
    assert tx.check_immunity_ms == 120_000


def test_send_to_an_unknown_topic_is_topic_not_found(stub, grpc_server):
    answer = send(stub, half("nope"))
    assert answer.status.code == Code.TOPIC_NOT_FOUND
    assert not ProducerGroup.objects.filter(name="nope").exists()


def test_fifo_messages_are_not_served(stub, topic):
    message = normal(topic)
    message.system_properties.message_type = pb.MessageType.FIFO
    answer = send(stub, message)
    assert answer.status.code == Code.BAD_REQUEST
    assert "FIFO" in answer.status.message


def end(
    stub,
    topic: str,
    transaction_id: str,
    resolution: int,
    source: int = pb.TransactionSource.SOURCE_CLIENT,
    client_id: str = "client-1",
):
    return stub.EndTransaction(
        spb.EndTransactionRequest(
            topic=pb.Resource(name=topic),
            message_id=transaction_id,
            transaction_id=transaction_id,
            resolution=resolution,
            source=source,
        ),
        metadata=metadata(client_id),
    )


def test_commit_delivers_and_names_the_client(stub, topic):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id))
    answer = end(stub, topic, msg_id, pb.TransactionResolution.COMMIT, client_id="client-9")
    assert answer.status.code == Code.OK
    tx = Transaction.objects.get(pk=msg_id)
    assert tx.state == TransactionState.COMMITTED
    assert tx.resolved_by == "producer"
    assert Resolution.objects.get(transaction_id=msg_id).reason == "gRPC client client-9"
    assert Message.objects.filter(msg_id=msg_id, topic=topic).count() == 1


def test_an_end_answering_a_check_is_resolved_by_check(stub, topic):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id))
    answer = end(
        stub,
        topic,
        msg_id,
        pb.TransactionResolution.ROLLBACK,
        pb.TransactionSource.SOURCE_SERVER_CHECK,
    )
    assert answer.status.code == Code.OK
    tx = Transaction.objects.get(pk=msg_id)
    assert (tx.state, tx.resolved_by) == (TransactionState.ROLLED_BACK, "check")


def test_the_same_end_again_is_ok_and_the_other_is_refused(stub, topic):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id))
    assert end(stub, topic, msg_id, pb.TransactionResolution.COMMIT).status.code == Code.OK
    assert end(stub, topic, msg_id, pb.TransactionResolution.COMMIT).status.code == Code.OK
    refused = end(stub, topic, msg_id, pb.TransactionResolution.ROLLBACK)
    assert refused.status.code == Code.PRECONDITION_FAILED
    assert "already" in refused.status.message


def test_an_unspecified_resolution_changes_nothing(stub, topic):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id))
    answer = end(stub, topic, msg_id, pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    assert answer.status.code == Code.OK
    assert Transaction.objects.get(pk=msg_id).state == TransactionState.PREPARED


def test_a_blank_transaction_id_is_invalid(stub, topic):
    answer = end(stub, topic, " ", pb.TransactionResolution.COMMIT)
    assert answer.status.code == Code.INVALID_TRANSACTION_ID


def test_an_unknown_transaction_is_not_found(stub, topic):
    answer = end(stub, topic, new_id(), pb.TransactionResolution.COMMIT)
    assert answer.status.code == Code.NOT_FOUND
    assert "does not exist" in answer.status.message


# --- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue -----


def test_receive_streams_status_then_messages_as_clients_read_them(stub, topic, group):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id, body=b"payload"))
    end(stub, topic, msg_id, pb.TransactionResolution.COMMIT)
    parts = receive(stub, group, topic)
    assert parts[0].WhichOneof("content") == "status"
    assert parts[0].status.code == Code.OK
    assert parts[-1].WhichOneof("content") == "delivery_timestamp"
    messages = [p.message for p in parts[1:-1]]
    assert len(messages) == 1
    message = messages[0]
    system = message.system_properties
    assert message.topic.name == topic
    assert message.body == b"payload"
    assert system.message_id == msg_id
    assert system.body_digest.type == pb.DigestType.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert system.body_encoding == pb.Encoding.IDENTITY
    assert system.message_type == pb.MessageType.TRANSACTION
    assert system.delivery_attempt == 1
    assert system.receipt_handle
    assert system.tag == "tagA"
    assert list(system.keys) == ["key1", "key2"]
    assert dict(message.user_properties) == {"k": "v"}
    assert system.born_timestamp.ToMilliseconds() > 0


def test_receive_without_messages_says_not_found_after_its_long_polling(stub, topic, group):
    started = time.monotonic()
    parts = receive(stub, group, topic, wait_s=1)
    assert [p.status.code for p in parts] == [Code.MESSAGE_NOT_FOUND]
    assert time.monotonic() - started >= 0.9  # it waited (about) its long polling timeout


def test_receive_ends_before_the_clients_deadline(stub, topic, group):
    # Past the 3 s deadline the stub would raise DEADLINE_EXCEEDED instead of this answer.
    parts = receive(stub, group, topic, wait_s=30, timeout=3)
    assert [p.status.code for p in parts] == [Code.MESSAGE_NOT_FOUND]


def on_server_loop(grpc_server, call):
    """``call(hub)`` run on the server's event loop with its ``WakeupHub``; its result."""

    async def run():
        return call(wakeup_hub())

    return grpc_server.run(run())


def test_a_commit_wakes_a_waiting_receive(stub, topic, group, grpc_server):
    msg_id = new_id()
    send(stub, half(topic, msg_id=msg_id))
    result: list = []
    waiting = threading.Thread(
        target=lambda: result.extend(receive(stub, group, topic, wait_s=20, timeout=25))
    )
    waiting.start()
    deadline = time.monotonic() + 20  # the receive waits (its first read found nothing) on a
    # subscribed hub: a wake-up from now on reaches it
    while not on_server_loop(
        grpc_server, lambda hub: hub.waiting() == 1 and hub.subscribed.is_set()
    ):
        assert time.monotonic() < deadline and waiting.is_alive(), "the receive never waited"
        time.sleep(0.02)
    seen = on_server_loop(grpc_server, lambda hub: hub.generation(topic_channel(topic)))
    end(stub, topic, msg_id, pb.TransactionResolution.COMMIT)
    waiting.join(25)
    assert [p.message.system_properties.message_id for p in result[1:-1]] == [msg_id]
    # Woken by the commit's wake-up (the hub saw one on the topic), not by its 5 s re-check.
    after = on_server_loop(grpc_server, lambda hub: hub.generation(topic_channel(topic)))
    assert after != seen, (seen, after)


def test_receive_for_an_unknown_group_is_consumer_group_not_found(stub, topic):
    parts = receive(stub, "nobody", topic)
    assert [p.status.code for p in parts] == [Code.CONSUMER_GROUP_NOT_FOUND]


def filtered_receive(stub, group, topic, kind, expression):
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=kind, expression=expression),
        invisible_duration=seconds(30),
    )
    return list(stub.ReceiveMessage(request, metadata=metadata(), timeout=5))


def test_receive_applies_its_tag_filter(stub, topic, group):
    sent = [message_send(topic=topic, body=b"m", tags=t) for t in ("tagA", "tagB", "tagA")]
    parts = filtered_receive(stub, group, topic, pb.FilterType.TAG, "tagA")
    got = [p.message.system_properties.message_id for p in parts if p.HasField("message")]
    assert sorted(got) == sorted(m.msg_id for m in sent if m.tags == "tagA")
    assert parts[0].status.code == Code.OK


def test_receive_applies_its_sql_filter_and_refuses_a_malformed_one(stub, topic, group):
    sent = [message_send(topic=topic, body=b"m", properties={"n": str(n)}) for n in (1, 7)]
    parts = filtered_receive(stub, group, topic, pb.FilterType.SQL, "n > 5")
    got = [p.message.system_properties.message_id for p in parts if p.HasField("message")]
    assert got == [sent[1].msg_id]
    parts = filtered_receive(stub, group, topic, pb.FilterType.SQL, "n >")
    assert [p.status.code for p in parts] == [Code.ILLEGAL_FILTER_EXPRESSION]
    assert "position 4" in parts[0].status.message


def test_receive_with_a_short_invisible_duration_is_refused(stub, topic, group):
    parts = receive(stub, group, topic, invisible_s=1)
    assert [p.status.code for p in parts] == [Code.ILLEGAL_INVISIBLE_TIME]


def received_one(stub, topic, group):
    message_send(topic=topic, body=b"m")
    parts = receive(stub, group, topic)
    return parts[1].message


def ack(stub, group, topic, *handles):
    return stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles],
        ),
        metadata=metadata(),
    )


def test_ack_then_ack_again_carries_the_failure_at_the_top(stub, topic, group):
    message = received_one(stub, topic, group)
    handle = message.system_properties.receipt_handle
    first = ack(stub, group, topic, handle)
    assert first.status.code == Code.OK
    assert [e.status.code for e in first.entries] == [Code.OK]
    second = ack(stub, group, topic, handle)
    assert second.status.code == Code.INVALID_RECEIPT_HANDLE
    assert [e.status.code for e in second.entries] == [Code.INVALID_RECEIPT_HANDLE]


def test_change_invisible_duration_answers_a_new_handle(stub, topic, group):
    message = received_one(stub, topic, group)
    old = message.system_properties.receipt_handle
    answer = stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=old,
            invisible_duration=seconds(0),
            message_id=message.system_properties.message_id,
        ),
        metadata=metadata(),
    )
    assert answer.status.code == Code.OK
    assert answer.receipt_handle and answer.receipt_handle != old
    assert ack(stub, group, topic, old).status.code == Code.INVALID_RECEIPT_HANDLE
    again = receive(stub, group, topic)
    assert again[1].message.system_properties.delivery_attempt == 2


def test_change_invisible_duration_of_a_bad_handle_echoes_it(stub, topic, group):
    answer = stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle="bogus",
            invisible_duration=seconds(10),
        ),
        metadata=metadata(),
    )
    assert answer.status.code == Code.INVALID_RECEIPT_HANDLE
    assert answer.receipt_handle == "bogus"


def test_forward_to_the_dead_letter_queue(stub, topic, group):
    message = received_one(stub, topic, group)
    answer = stub.ForwardMessageToDeadLetterQueue(
        spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=message.system_properties.receipt_handle,
            message_id=message.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=3,
        ),
        metadata=metadata(),
    )
    assert answer.status.code == Code.OK
    assert Message.objects.filter(topic=f"%DLQ%{group}").count() == 1


def test_query_assignment_names_every_queue(stub, topic, group):
    answer = stub.QueryAssignment(
        spb.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name=group)),
        metadata=metadata(),
    )
    assert answer.status.code == Code.OK
    assert sorted(a.message_queue.id for a in answer.assignments) == [0, 1, 2, 3]


# --- Heartbeat, NotifyClientTermination, access -------------------------------------------


def test_heartbeat_then_termination(stub, group):
    answer = stub.Heartbeat(
        spb.HeartbeatRequest(
            group=pb.Resource(name=group), client_type=pb.ClientType.SIMPLE_CONSUMER
        ),
        metadata=metadata("c-7"),
    )
    assert answer.status.code == Code.OK
    row = ClientConnection.objects.get(pk="c-7")
    assert (row.kind, row.consumer_group, row.disconnected_timestamp) == (
        "SIMPLE_CONSUMER",
        group,
        None,
    )
    bye = stub.NotifyClientTermination(
        spb.NotifyClientTerminationRequest(), metadata=metadata("c-7")
    )
    assert bye.status.code == Code.OK
    row.refresh_from_db()
    assert row.disconnected_timestamp is not None


def test_unserved_calls_are_unimplemented(stub, grpc_server):
    with pytest.raises(grpc.RpcError) as failure:
        stub.PullMessage(spb.PullMessageRequest(), metadata=metadata()).next()
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "Halfmoon does not serve PullMessage" in failure.value.details()
    with pytest.raises(grpc.RpcError) as failure:
        stub.QueryOffset(spb.QueryOffsetRequest(), metadata=metadata())
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_anonymous_calls_are_refused_unless_allowed(stub, topic, grpc_settings):
    grpc_settings.HALFMOON_GRPC_ALLOW_ANONYMOUS = False
    answer = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=metadata()
    )
    assert answer.status.code == Code.UNAUTHORIZED
    assert "HALFMOON_GRPC_ALLOW_ANONYMOUS" in answer.status.message


def test_a_key_may_not_send_for_another_group(grpc_server, stub, topic):
    from broker.grpc.convert import error_status
    from broker.services.access.callers import caller_of_key
    from broker.services.topology.clients import grpc_producer_group_resolve

    key, _ = access_key_create(name="orders-only", producer_groups=["G1", "G2"])
    with pytest.raises(Exception) as refused:
        grpc_producer_group_resolve(caller=caller_of_key(key), topic=topic)
    assert error_status(refused.value).code == Code.FORBIDDEN


def test_a_key_without_a_producer_group_may_not_send(grpc_server, stub, topic):
    from broker.services.access.secrets import access_key_secret_set
    from tests.grpc.test_signatures import signed

    access_key_create(name="billing-reader", consumer_groups=["C"])
    secret = access_key_secret_set(name="billing-reader")
    answer = stub.SendMessage(
        spb.SendMessageRequest(messages=[normal(topic)]), metadata=signed("billing-reader", secret)
    )
    assert answer.status.code == Code.FORBIDDEN, answer.status  # as HTTP's 403
    assert not Message.objects.filter(topic=topic).exists()


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_database_that_does_not_answer_is_ha_not_available_which_clients_retry(error):
    from broker.grpc.convert import error_status

    answer = error_status(error("connection failed: no primary"), call="SendMessage")

    assert answer.code == Code.HA_NOT_AVAILABLE
    assert "database" in answer.message

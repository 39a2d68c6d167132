"""Who may call: the ``MQv2-HMAC-SHA1`` signature of an access key with a SecretKey, the same
group permissions as over HTTP, anonymous calls refused unless allowed."""

from __future__ import annotations

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.models import Transaction
from broker.rules.signatures import signature_compute
from broker.services.access.secrets import access_key_secret_set
from broker.services.topology.writes import access_key_create, producer_group_create, topic_create
from tests.grpc.conftest import metadata
from tests.grpc.test_calls import half, new_id, send

pytestmark = pytest.mark.django_db(transaction=True)

Code = pb.Code
DATE = "20261128T093000Z"


def signed(name: str, secret: str, client_id: str = "signed-1") -> list[tuple[str, str]]:
    signature = signature_compute(secret=secret, date_time=DATE)
    return metadata(
        client_id,
        **{
            "x-mq-date-time": DATE,
            "authorization": f"MQv2-HMAC-SHA1 Credential={name}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature}",
        },
    )


@pytest.fixture
def refused_anonymous(grpc_settings):
    grpc_settings.HALFMOON_GRPC_ALLOW_ANONYMOUS = False


@pytest.fixture
def key_secret(grpc_server, refused_anonymous) -> str:
    topic_create(name="orders", queue_nums=1)
    producer_group_create(name="G", check_url=None)
    access_key_create(name="orders-app", producer_groups=["G"])
    return access_key_secret_set(name="orders-app")


def route(stub, md):
    return stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")), metadata=md)


def test_a_good_signature_is_served_and_a_bad_one_refused(stub, key_secret):
    assert route(stub, signed("orders-app", key_secret)).status.code == Code.OK
    wrong = route(stub, signed("orders-app", key_secret + "x"))
    assert wrong.status.code == Code.UNAUTHORIZED
    assert route(stub, signed("nobody", key_secret)).status.code == Code.UNAUTHORIZED
    assert route(stub, metadata()).status.code == Code.UNAUTHORIZED


def test_a_signed_half_message_belongs_to_the_keys_group(stub, key_secret):
    msg_id = new_id()
    answer = stub.SendMessage(
        spb.SendMessageRequest(messages=[half("orders", msg_id=msg_id)]),
        metadata=signed("orders-app", key_secret),
    )
    assert answer.status.code == Code.OK
    assert Transaction.objects.get(pk=msg_id).producer_group == "G"


def test_a_key_may_not_consume_for_a_group_it_does_not_hold(stub, key_secret):
    from broker.services.topology.writes import consumer_group_create

    consumer_group_create(name="C")
    request = spb.AckMessageRequest(
        group=pb.Resource(name="C"),
        topic=pb.Resource(name="orders"),
        entries=[spb.AckMessageEntry(receipt_handle="h")],
    )
    answer = stub.AckMessage(request, metadata=signed("orders-app", key_secret))
    assert answer.status.code == Code.FORBIDDEN


def test_the_official_client_signs_with_its_credentials(grpc_server, key_secret):
    config = ClientConfiguration(
        f"127.0.0.1:{grpc_server.port}", Credentials("orders-app", key_secret)
    )
    producer = Producer(config, ("orders",))
    producer.startup()
    try:
        message = Message()
        message.topic = "orders"
        message.body = b"signed"
        receipt = producer.send(message)
        assert receipt.message_id
    finally:
        producer.shutdown()


def test_anonymous_sends_work_when_allowed(stub, grpc_server):
    topic_create(name="orders", queue_nums=1)
    assert send(stub, half("orders")).status.code == Code.OK

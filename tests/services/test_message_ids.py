"""A normal message sent with the producer's own message id (a RocketMQ 5 client's): the id is
kept, and a resend of it is stored once (broker/services/commitlog/messages.py)."""

from __future__ import annotations

import threading

import pytest

from broker.errors import InvalidInput
from broker.models import Message
from broker.services.commitlog.messages import message_send
from broker.services.topology.writes import topic_create

pytestmark = pytest.mark.django_db

MSG_ID = "01A1B2C3D4E5F6000000000000000001AB"


@pytest.fixture
def topic(db) -> str:
    topic_create(name="orders", queue_nums=4)
    topic_create(name="invoices", queue_nums=1)
    return "orders"


def test_the_clients_message_id_is_kept(topic):
    message = message_send(topic=topic, body=b"a", msg_id=MSG_ID, producer_group="")
    assert message.msg_id == MSG_ID
    assert Message.objects.get(pk=message.commit_log_offset).properties["UNIQ_KEY"] == MSG_ID


def test_a_resend_is_stored_once(topic):
    first = message_send(topic=topic, body=b"a", msg_id=MSG_ID)
    again = message_send(topic=topic, body=b"a", msg_id=MSG_ID)
    assert again.commit_log_offset == first.commit_log_offset
    assert again.queue_offset == first.queue_offset
    assert Message.objects.filter(msg_id=MSG_ID).count() == 1


def test_the_same_id_on_another_topic_or_group_is_another_message(topic):
    message_send(topic=topic, body=b"a", msg_id=MSG_ID)
    message_send(topic="invoices", body=b"a", msg_id=MSG_ID)
    message_send(topic=topic, body=b"a", msg_id=MSG_ID, producer_group="G")
    assert Message.objects.filter(msg_id=MSG_ID).count() == 3


def test_without_an_id_each_send_is_a_new_message(topic):
    one = message_send(topic=topic, body=b"a")
    two = message_send(topic=topic, body=b"a")
    assert one.msg_id != two.msg_id


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, "é"])
def test_a_malformed_id_is_refused(topic, bad):
    with pytest.raises(InvalidInput) as refused:
        message_send(topic=topic, body=b"a", msg_id=bad)
    assert refused.value.code == "invalid_msg_id"


@pytest.mark.django_db(transaction=True)
def test_concurrent_resends_store_one_message(topic):
    from django.db import connection

    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def resend() -> None:
        try:
            barrier.wait(10)
            message_send(topic=topic, body=b"a", msg_id=MSG_ID)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=resend) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert Message.objects.filter(msg_id=MSG_ID).count() == 1

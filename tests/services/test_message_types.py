"""A topic's message type (RocketMQ 5's ``message.type``), checked by every send path in one
place (``message_type_check``): each type of message against each type of topic, with nothing
stored on a refusal; topics created without a type are MIXED; a topic's type may change."""

from __future__ import annotations

import pytest

from broker.errors import InvalidInput, NotFound
from broker.models import Message, ScheduledMessage, Topic, Transaction
from broker.rules.clock import now_ms
from broker.services.commitlog.batch import message_send_batch, transaction_prepare_batch
from broker.services.commitlog.messages import message_send
from broker.services.commitlog.validation import message_type_check
from broker.services.timers.schedule import message_send_at, message_send_timed
from broker.services.topology.writes import producer_group_create, topic_create, topic_update
from broker.services.transactions.half import transaction_prepare

HOUR = 3_600_000
TOPIC_TYPES = ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"]


@pytest.fixture
def group(db):
    producer_group_create(name="orders-tx", check_url=None)
    return "orders-tx"


def _send_normal(group: str) -> None:
    message_send(topic="Orders", body=b"n")


def _send_delay_later(group: str) -> None:
    message_send_at(delivery_timestamp=now_ms() + HOUR, topic="Orders", body=b"d")


def _send_delay_due(group: str) -> None:  # due now: still a DELAY message (RocketMQ's proxy)
    message_send_at(delivery_timestamp=now_ms() - 1000, topic="Orders", body=b"d")


def _send_delay_level(group: str) -> None:  # api-v1's delay_level
    message_send_timed(delay_level=3, topic="Orders", body=b"d")


def _send_half(group: str) -> None:
    transaction_prepare(producer_group=group, topic="Orders", body=b"t")


SENDS = {
    "NORMAL": [_send_normal],
    "DELAY": [_send_delay_later, _send_delay_due, _send_delay_level],
    "TRANSACTION": [_send_half],
}
CASES = [
    (topic_type, message_type, send)
    for topic_type in TOPIC_TYPES
    for message_type, sends in SENDS.items()
    for send in sends
]


def _stored() -> tuple[int, int, int]:
    return Message.objects.count(), ScheduledMessage.objects.count(), Transaction.objects.count()


@pytest.mark.parametrize(
    ("topic_type", "message_type", "send"),
    CASES,
    ids=[f"{t}-topic-{s.__name__[6:]}" for t, _, s in CASES],
)
def test_each_type_of_message_on_each_type_of_topic(group, topic_type, message_type, send):
    topic_create(name="Orders", queue_nums=2, message_type=topic_type)
    before = _stored()

    if topic_type in ("MIXED", message_type):
        send(group)
        assert _stored() != before
        return
    with pytest.raises(InvalidInput) as caught:
        send(group)

    assert caught.value.code == "message_type_mismatch"
    assert caught.value.details == {
        "topic": "Orders",
        "topic_message_type": topic_type,
        "message_type": message_type,
        "accepted_message_types": [topic_type],
    }
    assert caught.value.message.startswith(f"The topic Orders accepts {topic_type} messages")
    assert _stored() == before  # nothing stored on a refusal


def test_a_message_of_two_types_is_refused_before_the_topic_is_read(db):
    topic = Topic(name="Orders", queue_nums=1, message_type="MIXED")

    with pytest.raises(InvalidInput) as caught:
        message_type_check(topic, transactional=True, delivery_timestamp=1)

    assert caught.value.code == "message_type_conflict"
    assert "TRANSACTION and DELAY" in caught.value.message
    with pytest.raises(InvalidInput) as caught:
        message_type_check(topic, delivery_timestamp=1, message_group="g")
    assert caught.value.code == "message_type_conflict"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "NORMAL"),
        ({"transactional": True}, "TRANSACTION"),
        ({"delivery_timestamp": 0}, "DELAY"),
        ({"message_group": "g"}, "FIFO"),
    ],
)
def test_the_check_answers_the_messages_type_on_a_mixed_topic(db, fields, expected):
    topic = Topic(name="Orders", queue_nums=1, message_type="MIXED")

    assert message_type_check(topic, **fields) == expected


def test_a_fifo_message_is_refused_by_a_normal_topic(db):
    topic = Topic(name="Orders", queue_nums=1, message_type="NORMAL")

    with pytest.raises(InvalidInput) as caught:
        message_type_check(topic, message_group="order-7")

    assert caught.value.details["message_type"] == "FIFO"


def test_a_batch_refuses_only_its_items_of_another_type(db):
    topic_create(name="Orders", queue_nums=2, message_type="DELAY")

    outcomes = message_send_batch(
        sends=[
            {"topic": "Orders", "body": b"now"},
            {"topic": "Orders", "body": b"later", "deliver_at": now_ms() + HOUR},
            {"topic": "Orders", "body": b"level", "delay_level": 2},
        ]
    )

    assert isinstance(outcomes[0], InvalidInput)
    assert outcomes[0].code == "message_type_mismatch"
    assert [type(o) for o in outcomes[1:]] == [ScheduledMessage, ScheduledMessage]
    assert Message.objects.filter(topic="Orders").count() == 0


def test_a_half_message_batch_on_a_normal_topic_stores_nothing(group):
    topic_create(name="Orders", queue_nums=2, message_type="NORMAL")

    outcomes = transaction_prepare_batch(
        sends=[{"producer_group": group, "topic": "Orders", "body": b"t"}]
    )

    assert isinstance(outcomes[0], InvalidInput)
    assert outcomes[0].code == "message_type_mismatch"
    assert Transaction.objects.count() == 0 and Message.objects.count() == 0


def test_a_topic_created_without_a_type_is_mixed(db):
    assert topic_create(name="Orders", queue_nums=1).message_type == "MIXED"
    assert Topic.objects.get(name="Orders").message_type == "MIXED"


def test_an_unknown_type_is_refused_at_creation_and_change(db):
    with pytest.raises(InvalidInput) as caught:
        topic_create(name="Orders", queue_nums=1, message_type="PRIORITY")
    assert caught.value.code == "invalid_message_type"
    assert not Topic.objects.filter(name="Orders").exists()

    topic_create(name="Orders", queue_nums=1)
    with pytest.raises(InvalidInput) as caught:
        topic_update(name="Orders", message_type="LITE")
    assert caught.value.code == "invalid_message_type"
    assert Topic.objects.get(name="Orders").message_type == "MIXED"


def test_a_topic_holding_messages_changes_type_and_the_next_send_is_checked(group):
    topic_create(name="Orders", queue_nums=2)
    message_send(topic="Orders", body=b"before")

    topic = topic_update(name="Orders", message_type="TRANSACTION")

    assert (topic.message_type, topic.queue_nums) == ("TRANSACTION", 2)
    assert Topic.objects.get(name="Orders").message_type == "TRANSACTION"
    assert Message.objects.filter(topic="Orders").count() == 1  # stored messages stay
    with pytest.raises(InvalidInput):
        message_send(topic="Orders", body=b"after")
    transaction_prepare(producer_group=group, topic="Orders", body=b"t")


def test_a_change_of_queues_alone_keeps_the_type_and_of_type_alone_the_queues(db):
    topic_create(name="Orders", queue_nums=2, message_type="DELAY")

    assert topic_update(name="Orders", queue_nums=4).message_type == "DELAY"
    topic = topic_update(name="Orders", message_type="NORMAL")
    assert (topic.queue_nums, topic.message_type) == (4, "NORMAL")
    assert topic_update(name="Orders").message_type == "NORMAL"  # nothing given: no change


def test_an_unknown_topic_is_not_found(db):
    with pytest.raises(NotFound):
        topic_update(name="Nowhere", message_type="NORMAL")

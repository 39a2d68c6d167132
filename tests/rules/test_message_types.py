"""broker.rules.message_types: a message is of exactly one type, and a topic accepts its own
type, or every type when MIXED (RocketMQ 5's ``TopicMessageType`` and the proxy's
``TopicMessageTypeValidator``)."""

from __future__ import annotations

import pytest

from broker.rules.message_types import (
    MESSAGE_TYPES,
    MessageTypeConflict,
    TopicMessageType,
    accepted_types,
    message_type_of,
    mismatch_message,
    topic_accepts,
)

T = TopicMessageType


def test_the_types_are_rocketmqs_with_mixed_last():
    assert T.values == ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"]
    assert MESSAGE_TYPES == (T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION)
    assert T.labels == ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED (every type)"]


@pytest.mark.parametrize(
    ("transactional", "delivery_timestamp", "message_group", "expected"),
    [
        (False, None, "", T.NORMAL),
        (True, None, "", T.TRANSACTION),
        (False, 1_700_000_000_000, "", T.DELAY),
        (False, 0, "", T.DELAY),  # a time in the past (the epoch) is still a DELAY message
        (False, None, "order-1", T.FIFO),
    ],
)
def test_a_message_has_the_type_its_one_field_names(
    transactional, delivery_timestamp, message_group, expected
):
    kind = message_type_of(
        transactional=transactional,
        delivery_timestamp=delivery_timestamp,
        message_group=message_group,
    )

    assert kind is expected


@pytest.mark.parametrize(
    ("transactional", "delivery_timestamp", "message_group", "named"),
    [
        (True, 5, "", "TRANSACTION and DELAY"),
        (True, None, "g", "TRANSACTION and FIFO"),
        (False, 5, "g", "DELAY and FIFO"),
        (True, 5, "g", "TRANSACTION and DELAY and FIFO"),
    ],
)
def test_a_message_of_two_types_is_refused_naming_them(
    transactional, delivery_timestamp, message_group, named
):
    with pytest.raises(MessageTypeConflict) as caught:
        message_type_of(
            transactional=transactional,
            delivery_timestamp=delivery_timestamp,
            message_group=message_group,
        )

    assert str(caught.value) == f"A message is of one type: it cannot be {named} at once."
    assert caught.value.code == "message_type_conflict"
    assert isinstance(caught.value, ValueError)


def test_mixed_accepts_every_type_and_the_others_only_their_own():
    assert accepted_types("MIXED") == (T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION)
    for kind in MESSAGE_TYPES:
        assert accepted_types(kind) == (kind,)
        assert accepted_types(str(kind)) == (kind,)


@pytest.mark.parametrize("topic_type", T.values)
@pytest.mark.parametrize("message_type", [str(t) for t in MESSAGE_TYPES])
def test_topic_accepts_each_pair(topic_type, message_type):
    expected = topic_type in ("MIXED", message_type)

    assert topic_accepts(topic_type, message_type) is expected


def test_an_unknown_topic_type_is_a_value_error():
    with pytest.raises(ValueError):
        accepted_types("PRIORITY")


def test_the_mismatch_message_names_the_topic_and_both_types():
    text = mismatch_message(topic="Orders", topic_type="TRANSACTION", message_type="NORMAL")

    assert text == (
        "The topic Orders accepts TRANSACTION messages, not a NORMAL message (its "
        "message_type can be changed, or the message sent to another topic)."
    )

"""What a stored message is (``message_kind``) and where it stands with a consumer group
(``delivery_state``)."""

from __future__ import annotations

import pytest

from broker.rules.messages import (
    DELIVERY_STATE_TEXT,
    MESSAGE_KIND_TEXT,
    DeliveryState,
    MessageKind,
    delivery_state,
    message_kind,
)


@pytest.mark.parametrize(
    ("topic", "prepared", "kind"),
    [
        ("RMQ_SYS_TRANS_HALF_TOPIC", None, MessageKind.HALF),
        ("RMQ_SYS_TRANS_OP_HALF_TOPIC", None, MessageKind.OP),
        ("TRANS_CHECK_MAX_TIME_TOPIC", None, MessageKind.DISCARDED),
        ("%DLQ%billing", None, MessageKind.DEAD_LETTER),
        ("%DLQ%billing", 17, MessageKind.DEAD_LETTER),
        ("%RETRY%billing", None, MessageKind.RETRY),
        ("RMQ_SYS_WHEEL_TIMER", None, MessageKind.SCHEDULED),
        ("Orders", 17, MessageKind.COMMITTED),
        ("Orders", 0, MessageKind.COMMITTED),
        ("Orders", None, MessageKind.NORMAL),
        ("RMQ_SYS_TRANS_HALF_TOPICX", None, MessageKind.NORMAL),
        ("X%DLQ%billing", None, MessageKind.NORMAL),
    ],
)
def test_a_message_is_known_by_where_it_is_stored(topic, prepared, kind):
    assert message_kind(topic, prepared) is kind


NOW = 1_000_000


@pytest.mark.parametrize(
    ("last_event", "invisible_until", "offset_passed", "filtered_out", "state"),
    [
        ("delivered", NOW + 1, True, False, DeliveryState.IN_FLIGHT),
        ("delivered", NOW, True, False, DeliveryState.REDELIVERY_DUE),
        ("delivered", NOW - 1, True, False, DeliveryState.REDELIVERY_DUE),
        ("acked", NOW + 1, True, False, DeliveryState.IN_FLIGHT),  # resent after its ack
        ("acked", None, True, False, DeliveryState.ACKED),
        ("dead_lettered", None, True, False, DeliveryState.DEAD_LETTERED),
        (None, None, True, False, DeliveryState.PASSED),
        ("delivered", None, True, False, DeliveryState.PASSED),
        (None, None, False, False, DeliveryState.WAITING),
        # the group's filter rejects it: never delivered, whatever the offset says
        (None, None, True, True, DeliveryState.FILTERED_OUT),
        (None, None, False, True, DeliveryState.FILTERED_OUT),
        # journalled before the filter changed: the journal says what happened
        ("acked", None, True, True, DeliveryState.ACKED),
        ("delivered", None, True, True, DeliveryState.PASSED),
        ("delivered", NOW + 1, True, True, DeliveryState.IN_FLIGHT),
    ],
)
def test_where_a_message_stands_with_a_group(
    last_event, invisible_until, offset_passed, filtered_out, state
):
    assert (
        delivery_state(
            last_event=last_event,
            invisible_until=invisible_until,
            offset_passed=offset_passed,
            now=NOW,
            filtered_out=filtered_out,
        )
        is state
    )


def test_a_message_is_not_filtered_out_unless_said():
    assert delivery_state(last_event=None, invisible_until=None, offset_passed=False, now=NOW) is (
        DeliveryState.WAITING
    )


def test_every_kind_and_state_has_words():
    assert set(MESSAGE_KIND_TEXT) == set(MessageKind)
    assert set(DELIVERY_STATE_TEXT) == set(DeliveryState)
    assert MESSAGE_KIND_TEXT[MessageKind.OP] == "Op message"
    assert DELIVERY_STATE_TEXT[DeliveryState.PASSED].startswith("passed")

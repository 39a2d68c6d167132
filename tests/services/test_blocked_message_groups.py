"""The operator's dead-letter of a blocked message group's head
(broker.services.consumption.blocked_message_groups): the head the operator saw, or a refusal
naming the head now; the consumer holding it loses its receipt handle; the move is the
consumer's own dead-letter (one DLQ copy, one journal row)."""

from __future__ import annotations

import pytest

from broker.constants import dlq_topic
from broker.errors import Conflict, NotFound
from broker.models import AuditEntry, DeliveryEvent, Message
from broker.services.consumption.blocked_message_groups import blocked_message_group_dead_letter
from broker.services.consumption.receive import messages_ack
from tests.fifo_state import block_heads, fifo_group, nack, receive, send_group

pytestmark = pytest.mark.django_db


def _dead_letter(msg_id: str | None, **kw) -> AuditEntry:
    args = {
        "consumer_group": "F",
        "topic": "Orders",
        "message_group": "order-1",
        "msg_id": msg_id,
        "reason": "poison",
        "actor": "operator:olga",
        "via": "api",
        **kw,
    }
    return blocked_message_group_dead_letter(**args)


@pytest.fixture
def fifo(db) -> list[Message]:
    fifo_group("F", max_delivery_attempts=5)
    return send_group("order-1", 3)


def test_a_head_replaced_since_it_was_seen_is_refused_naming_the_head_now(fifo):
    [first] = block_heads("F")
    messages_ack(consumer_group="F", receipt_handles=[first.receipt_handle])
    [second] = block_heads("F")  # the next head, failed in turn
    assert second.message.msg_id == fifo[1].msg_id

    with pytest.raises(Conflict) as refused:
        _dead_letter(fifo[0].msg_id)
    assert refused.value.code == "message_group_head_changed"
    assert refused.value.details == {"msg_id": fifo[1].msg_id, "expected": fifo[0].msg_id}
    assert not AuditEntry.objects.exists()

    entry = _dead_letter(None)  # whatever head is blocked now
    assert entry.scope["msg_id"] == fifo[1].msg_id


def test_the_consumer_holding_the_head_loses_its_handle_and_the_move_is_recorded_once(fifo):
    [held] = block_heads("F", failures=3)
    _dead_letter(fifo[0].msg_id)

    messages_ack(consumer_group="F", receipt_handles=[held.receipt_handle])  # ignored: gone
    assert Message.objects.filter(topic=dlq_topic("F")).count() == 1
    assert DeliveryEvent.objects.filter(kind="dead_lettered").count() == 1
    assert DeliveryEvent.objects.filter(kind="acked").count() == 0
    [nxt] = receive("F")
    assert (nxt.message.msg_id, nxt.delivery_attempt) == (fifo[1].msg_id, 1)


def test_a_nacked_head_not_handed_out_again_is_blocked_and_can_go(fifo):
    [got] = receive("F")
    nack("F", [got])
    entry = _dead_letter(fifo[0].msg_id)
    assert entry.targets.get().detail["delivery_attempt"] == 1


def test_an_unknown_group_is_not_found_and_a_head_in_its_first_hand_out_not_blocked(fifo):
    with pytest.raises(NotFound):
        _dead_letter(None, consumer_group="nope")
    receive("F")
    with pytest.raises(Conflict) as refused:
        _dead_letter(fifo[0].msg_id)
    assert refused.value.code == "message_group_not_blocked"

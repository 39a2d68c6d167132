"""The delivery journal (DeliveryEvent, broker.services.consumption.receive): every hand-out (each
attempt), ack and dead letter of a consumer group, written with the receive or ack itself, and
the transaction timeline's consumer entries read from it."""

from __future__ import annotations

import pytest
from django.db import transaction

from broker.models import Delivery, DeliveryEvent, Message
from broker.selectors.timeline import transaction_timeline
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from tests.support import prepare


@pytest.fixture
def orders(db):
    return topic_create(name="Orders", queue_nums=2)


def _receive(group: str, topic: str = "Orders", max_messages: int = 32):
    return messages_receive(
        consumer_group=group, topic=topic, max_messages=max_messages, invisible_duration_ms=10_000
    )


def _expire(group: str) -> None:
    Delivery.objects.filter(consumer_group=group).update(invisible_until_timestamp=0)


def _journal(group: str) -> list[tuple[str, str, int]]:
    """(msg_id, kind, attempt) of the group's journal rows, in insertion order."""
    return list(
        DeliveryEvent.objects.filter(consumer_group=group)
        .order_by("id")
        .values_list("msg_id", "kind", "delivery_attempt")
    )


def test_receive_redelivery_and_ack_are_journalled(orders):
    consumer_group_create(name="C", max_delivery_attempts=5)
    sent = [message_send(topic="Orders", body=f"m{i}".encode()) for i in range(3)]
    first = _receive("C")
    assert sorted(e[0] for e in _journal("C")) == sorted(m.msg_id for m in sent)
    assert {(kind, attempt) for _, kind, attempt in _journal("C")} == {("delivered", 1)}

    _expire("C")
    again = _receive("C", max_messages=1)
    assert _journal("C")[-1] == (again[0].message.msg_id, "delivered", 2)

    redelivered = again[0].message
    stale = next(r.receipt_handle for r in first if r.message == redelivered)
    acked, failed = messages_ack(
        consumer_group="C", receipt_handles=[r.receipt_handle for r in first + again]
    )
    assert (acked, [f["receipt_handle"] for f in failed]) == (3, [stale])
    acks = [e for e in _journal("C") if e[1] == "acked"]
    assert sorted(acks) == sorted(
        [(r.message.msg_id, "acked", 1) for r in first if r.message != redelivered]
        + [(redelivered.msg_id, "acked", 2)]
    )
    # Each row names where the message lies and when.
    for event in DeliveryEvent.objects.all():
        message = Message.objects.get(pk=event.commit_log_offset)
        assert (event.topic, event.queue_id, event.queue_offset, event.msg_id) == (
            message.topic,
            message.queue_id,
            message.queue_offset,
            message.msg_id,
        )
        assert event.timestamp >= message.store_timestamp


def test_a_stale_or_repeated_ack_journals_nothing(orders):
    consumer_group_create(name="C")
    message_send(topic="Orders", body=b"m")
    handle = _receive("C")[0].receipt_handle
    assert messages_ack(consumer_group="C", receipt_handles=[handle, handle])[0] == 1
    assert messages_ack(consumer_group="C", receipt_handles=[handle])[0] == 0
    assert [kind for _, kind, _ in _journal("C")] == ["delivered", "acked"]


def test_dead_letter_is_journalled_with_its_last_attempt(orders):
    consumer_group_create(name="C", max_delivery_attempts=2)
    message = message_send(topic="Orders", body=b"poison")
    for _ in range(2):
        _receive("C")
        _expire("C")
    assert _receive("C") == []  # moved to %DLQ%C instead of a third attempt
    assert _journal("C") == [
        (message.msg_id, "delivered", 1),
        (message.msg_id, "delivered", 2),
        (message.msg_id, "dead_lettered", 2),
    ]
    dead = DeliveryEvent.objects.get(kind="dead_lettered")
    assert dead.commit_log_offset == message.commit_log_offset  # the original, not the copy
    assert Message.objects.filter(topic="%DLQ%C", msg_id=message.msg_id).exists()


def test_a_receive_that_rolls_back_journals_nothing(orders):
    consumer_group_create(name="C")
    message_send(topic="Orders", body=b"m")
    with pytest.raises(RuntimeError), transaction.atomic():
        _receive("C")
        raise RuntimeError("the caller's transaction fails")
    assert not DeliveryEvent.objects.exists()
    assert len(_receive("C")) == 1  # still there to take


def test_the_timeline_shows_each_groups_hand_outs_acks_and_dead_letters(
    topic, producer_group, consumer_group
):
    consumer_group_create(name="D", max_delivery_attempts=1)
    consumer_group_create(name="W")
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    handles = [r.receipt_handle for r in _receive("C", topic="TranTest")]
    _expire("C")
    handles += [r.receipt_handle for r in _receive("C", topic="TranTest")]
    messages_ack(consumer_group="C", receipt_handles=handles)
    _receive("D", topic="TranTest")
    _expire("D")
    _receive("D", topic="TranTest")
    in_flight = _receive("W", topic="TranTest")

    consumer = [e for e in transaction_timeline(tx.pk) if e.kind.startswith("consumer_")]
    timed = [(e.kind, e.actor, e.detail["delivery_attempt"]) for e in consumer if e.timestamp]
    assert timed == [
        ("consumer_received", "C", 1),
        ("consumer_received", "C", 2),
        ("consumer_acked", "C", 2),
        ("consumer_received", "D", 1),
        ("consumer_dead_lettered", "D", 1),
        ("consumer_received", "W", 1),
    ]
    dead = next(e for e in consumer if e.kind == "consumer_dead_lettered")
    copy = Message.objects.get(topic="%DLQ%D")
    assert dead.detail["commit_log_offset"] == copy.commit_log_offset
    assert dead.title == "Dead-lettered to %DLQ%D after 1 attempts"
    # What W holds now comes last, untimed; C and D have nothing left to say there.
    untimed = [(e.kind, e.actor) for e in consumer if e.timestamp is None]
    assert untimed == [("consumer_in_flight", "W")]
    assert consumer[-1].detail["delivery_attempt"] == in_flight[0].delivery_attempt


def test_the_timeline_falls_back_to_offsets_without_a_journal(
    topic, producer_group, consumer_group
):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    handles = [r.receipt_handle for r in _receive("C", topic="TranTest")]
    messages_ack(consumer_group="C", receipt_handles=handles)
    DeliveryEvent.objects.all().delete()  # delivered before the journal, or pruned

    consumer = [e for e in transaction_timeline(tx.pk) if e.kind.startswith("consumer_")]
    assert [(e.kind, e.timestamp) for e in consumer] == [("consumer_acked", None)]

"""FIFO consumer groups (broker.services.consumption.fifo_take through messages_receive): each
message group's messages in send order, the next after the previous is acked or dead-lettered,
groups in parallel, redelivery keeping the order, filters, and the invariant the blocked
message groups rely on: at most one message of a (topic, message group) in flight, its head."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from broker.errors import InvalidInput
from broker.models import ConsumerOffset, Delivery, FifoTaken, Message
from broker.rules.fifo import message_group_queue
from broker.rules.filters import FilterExpression, FilterType
from broker.services.commitlog.messages import message_send
from broker.services.commitlog.storage import message_new, messages_store
from broker.services.consumption.deliveries import delivery_dead_letter, delivery_invisible_change
from broker.services.consumption.offset_resets import backlog_skip_preview, offset_reset_apply
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.timers.schedule import message_send_timed
from broker.services.topology.writes import (
    consumer_group_create,
    consumer_group_update,
    topic_create,
)

INVISIBLE = 10_000


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="F", max_delivery_attempts=2, fifo=True)
    consumer_group_create(name="N", max_delivery_attempts=2)


def _send(group: str, n: int, **kwargs) -> list[Message]:
    return [
        message_send(topic="Orders", body=f"{group}-{i}".encode(), message_group=group, **kwargs)
        for i in range(n)
    ]


def _receive(group: str = "F", want: int = 32, **kwargs) -> list:
    return messages_receive(
        consumer_group=group,
        topic="Orders",
        max_messages=want,
        invisible_duration_ms=INVISIBLE,
        **kwargs,
    )


def _bodies(received) -> list[str]:
    return sorted(bytes(r.message.body).decode() for r in received)


def _ack(received, group: str = "F") -> None:
    assert messages_ack(consumer_group=group, receipt_handles=[r.receipt_handle for r in received])[
        0
    ] == len(received)


def _expire(group: str = "F") -> None:
    Delivery.objects.filter(consumer_group=group).update(invisible_until_timestamp=0)


def _in_flight_heads(group: str = "F") -> dict[str, list[int]]:
    """(message group -> the queue offsets of its messages in flight)."""
    out: dict[str, list[int]] = {}
    for d in Delivery.objects.filter(consumer_group=group).select_related("message"):
        out.setdefault(d.message.message_group, []).append(d.message.queue_offset)
    return out


def test_a_message_group_goes_to_one_queue_in_send_order(orders):
    sent = _send("g1", 5)
    queue = message_group_queue("g1", 2)
    assert {m.queue_id for m in sent} == {queue}
    assert [m.queue_offset for m in sent] == sorted(m.queue_offset for m in sent)
    assert Message.objects.get(pk=sent[0].pk).message_group == "g1"


@pytest.mark.parametrize("group", [" ", "x" * 65, "a\nb", "a\x7fb"])
def test_an_illegal_message_group_is_refused(orders, group):
    with pytest.raises(InvalidInput) as caught:
        message_send(topic="Orders", body=b"x", message_group=group)
    assert caught.value.code == "illegal_message_group"


def test_a_fifo_message_may_not_be_delayed(orders):
    with pytest.raises(InvalidInput) as caught:
        message_send_timed(topic="Orders", body=b"x", message_group="g", delay_level=1)
    assert caught.value.code == "message_type_conflict"


def test_each_group_hands_out_its_head_only_and_the_next_after_the_ack(orders):
    _send("g1", 3)
    _send("g2", 2)
    first = _receive()
    assert _bodies(first) == ["g1-0", "g2-0"]
    assert _receive() == []  # both heads in flight: nothing else
    [g1_head] = [r for r in first if r.message.message_group == "g1"]
    _ack([g1_head])
    assert _bodies(_receive()) == ["g1-1"]  # g2 still blocked behind its head
    _ack([r for r in first if r.message.message_group == "g2"])
    assert _bodies(_receive()) == ["g2-1"]


def test_groups_in_one_queue_proceed_in_parallel(orders):
    # Two groups hashed to one queue, interleaved: a blocked one does not hold the other back.
    groups = [g for g in (f"k{i}" for i in range(40)) if message_group_queue(g, 2) == 0][:2]
    a, b = groups
    for i in range(3):
        message_send(topic="Orders", body=f"{a}-{i}".encode(), message_group=a)
        message_send(topic="Orders", body=f"{b}-{i}".encode(), message_group=b)
    got = _receive()
    assert _bodies(got) == [f"{a}-0", f"{b}-0"]
    _ack([r for r in got if r.message.message_group == b])
    assert _bodies(_receive()) == [f"{b}-1"]
    got_b = Delivery.objects.get(consumer_group="F", message__message_group=b)
    messages_ack(consumer_group="F", receipt_handles=[got_b.receipt_handle])
    assert _bodies(_receive()) == [f"{b}-2"]
    # the offset waits at a's next message (a-1 at 2, behind a-0 in flight); b's messages
    # taken past it (b-1 at 3, b-2 at 5) are remembered
    offset = ConsumerOffset.objects.get(consumer_group="F", topic="Orders", queue_id=0)
    assert offset.offset == 2
    assert sorted(
        FifoTaken.objects.filter(consumer_group="F").values_list("queue_offset", flat=True)
    ) == [3, 5]
    for d in Delivery.objects.filter(consumer_group="F"):
        messages_ack(consumer_group="F", receipt_handles=[d.receipt_handle])
    assert _bodies(_receive()) == [f"{a}-1"]
    offset.refresh_from_db()
    assert offset.offset == 4  # a-2 at 4 waits behind a-1
    assert list(FifoTaken.objects.values_list("queue_offset", flat=True)) == [5]


def test_messages_without_a_group_are_taken_as_normal_ones(orders):
    _send("g1", 2)
    plain = [message_send(topic="Orders", body=f"p{i}".encode()) for i in range(3)]
    got = _receive()
    assert _bodies(got) == ["g1-0", "p0", "p1", "p2"]
    assert {r.message.msg_id for r in got} >= {m.msg_id for m in plain}


def test_redelivery_after_the_invisible_time_hands_out_the_same_head(orders):
    _send("g1", 3)
    [head] = _receive()
    _expire()
    [again] = _receive()
    assert again.message.pk == head.message.pk
    assert again.delivery_attempt == 2
    _ack([again])
    assert _bodies(_receive()) == ["g1-1"]


def test_the_head_past_its_attempts_goes_to_the_dlq_and_releases_the_next(orders):
    _send("g1", 2)
    _receive()
    _expire()
    _receive()  # attempt 2 of 2
    _expire()
    got = _receive()  # the head is dead-lettered, the next one handed out in the same receive
    assert _bodies(got) == ["g1-1"]
    assert Message.objects.filter(topic="%DLQ%F").count() == 1


def test_a_consumer_forwarding_the_head_to_the_dlq_releases_the_next(orders):
    _send("g1", 2)
    [head] = _receive()
    delivery_dead_letter(consumer_group="F", receipt_handle=head.receipt_handle)
    assert _bodies(_receive()) == ["g1-1"]


def test_a_nack_keeps_the_head(orders):
    _send("g1", 2)
    [head] = _receive()
    delivery_invisible_change(
        consumer_group="F", receipt_handle=head.receipt_handle, invisible_duration_ms=0
    )
    [again] = _receive()
    assert again.message.pk == head.message.pk


def test_a_filter_applies_and_a_rejected_message_does_not_block(orders):
    for i, tag in enumerate(["A", "B", "A"]):
        message_send(topic="Orders", body=f"g1-{i}".encode(), tags=tag, message_group="g1")
    only_a = FilterExpression(FilterType.TAG, "A")
    [first] = _receive(filter_expression=only_a)
    assert bytes(first.message.body) == b"g1-0"
    _ack([first])
    [second] = _receive(filter_expression=only_a)
    assert bytes(second.message.body) == b"g1-2"  # g1-1 (tag B) counts as consumed


def test_a_normal_group_takes_every_message_at_once(orders):
    _send("g1", 3)
    assert _bodies(_receive("N")) == ["g1-0", "g1-1", "g1-2"]


def test_a_group_made_fifo_orders_from_then_on(orders):
    consumer_group_update(name="N", fifo=True)
    _send("g1", 2)
    assert _bodies(_receive("N")) == ["g1-0"]


def test_a_group_made_not_fifo_forgets_what_it_took_past_its_offsets(orders):
    _send("g1", 2)
    queue = message_group_queue("g1", 2)
    messages_store([message_new(topic="Orders", queue_id=queue, msg_id="P1", body=b"p")])
    assert _bodies(_receive()) == ["g1-0", "p"]
    assert list(FifoTaken.objects.values_list("queue_offset", flat=True)) == [2]
    consumer_group_update(name="F", fifo=False)
    assert not FifoTaken.objects.exists()
    # p's delivery (past the offset) is gone; g1-0's (below it) stays in flight
    assert _in_flight_heads() == {"g1": [0]}
    # from the offset (g1-1) on, as a normal group: p comes again (at least once)
    assert _bodies(_receive()) == ["g1-1", "p"]


def test_want_bounds_the_take_and_the_offset_stops_at_the_first_left(orders):
    plain = [message_send(topic="Orders", body=f"p{i}".encode()) for i in range(6)]
    got = _receive(want=2)
    assert len(got) == 2
    rest = _receive()
    assert len(rest) == 4
    assert {r.message.pk for r in got + rest} == {m.pk for m in plain}


def test_a_backlog_skip_forgets_what_was_taken_below_the_new_offsets(orders):
    groups = [g for g in (f"k{i}" for i in range(40)) if message_group_queue(g, 2) == 0][:2]
    a, b = groups
    for group in (a, b, b):
        message_send(topic="Orders", body=group.encode(), message_group=group)
    _receive()  # a at 0 and b at 1 in flight, b at 2 waits: offset 2, nothing past it taken
    held = Delivery.objects.get(consumer_group="F", message__message_group=b)
    messages_ack(consumer_group="F", receipt_handles=[held.receipt_handle])
    _receive()  # b at 2 taken
    assert list(FifoTaken.objects.values_list("queue_offset", flat=True)) == []
    message_send(topic="Orders", body=b"a1", message_group=a)  # at 3, behind a's head
    message_send(topic="Orders", body=b"b3", message_group=b)  # at 4, taken past a1
    held = Delivery.objects.get(consumer_group="F", message__message_group=b)
    messages_ack(consumer_group="F", receipt_handles=[held.receipt_handle])
    assert _bodies(_receive()) == ["b3"]
    assert list(FifoTaken.objects.values_list("queue_offset", flat=True)) == [4]
    entry = backlog_skip_preview(consumer_group="F", actor="console:olga", via="console")
    offset_reset_apply(reset_id=entry.pk, reason="skip the backlog", actor="console:olga")
    assert ConsumerOffset.objects.get(consumer_group="F", queue_id=0).offset == 5
    assert not FifoTaken.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_group_held_by_another_receiver_is_passed_over_in_every_queue():
    # g's messages lie in both queues (a producer that chose queues itself): a receiver
    # holding g (its advisory lock) keeps this one off g in either queue, not off the others.
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="F", fifo=True)
    for queue in (0, 1):
        messages_store(
            [
                message_new(topic="Orders", queue_id=queue, msg_id=f"G{queue}", body=b"g",
                            message_group="g"),
                message_new(topic="Orders", queue_id=queue, msg_id=f"P{queue}", body=b"p"),
            ]
        )  # fmt: skip
    params = connection.settings_dict
    with psycopg.connect(
        host=params["HOST"], port=params["PORT"], user=params["USER"], dbname=params["NAME"],
        autocommit=True,
    ) as other:  # fmt: skip
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 38))", ["F\x01Orders\x01g"])
        got = _receive()
        assert _bodies(got) == ["p", "p"]
        # each queue's offset waits at g's message
        assert sorted(ConsumerOffset.objects.values_list("offset", flat=True)) == [0, 0]
        other.execute("SELECT pg_advisory_unlock_all()")
    assert _bodies(_receive()) == ["g"]  # one of g's two, never both
    assert _receive() == []


@pytest.mark.django_db(transaction=True)
def test_two_receivers_never_hold_two_messages_of_one_group():
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="F", max_delivery_attempts=5, fifo=True)
    for group in ("g1", "g2", "g3"):
        _send(group, 10)
    seen: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            for _ in range(40):
                got = _receive(want=4)
                heads = _in_flight_heads()
                assert all(len(v) == 1 for v in heads.values()), heads
                with lock:
                    seen.extend((r.message.message_group, r.message.queue_offset) for r in got)
                _ack(got)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    by_group: dict[str, list[int]] = {}
    for group, offset in seen:
        by_group.setdefault(group, []).append(offset)
    assert sorted(by_group) == ["g1", "g2", "g3"]
    for offsets in by_group.values():
        assert offsets == sorted(offsets)
        assert len(offsets) == 10

"""A FIFO consumer group's blocked message groups (broker.selectors.blocked_message_groups):
which heads count as blocked, since when, what waits behind them, the order, the page bound,
and the per-group counts behind /metrics and the fifo_blocked alert."""

from __future__ import annotations

import pytest
from django.db import connection

import broker.selectors.blocked_message_groups as selector
from broker.models import ConsumerGroup, Delivery, DeliveryEvent
from broker.rules.clock import now_ms
from broker.selectors.blocked_message_groups import (
    blocked_message_group_counts,
    blocked_message_group_get,
    blocked_message_groups,
)
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack
from tests.fifo_state import block_heads, fifo_group, nack, receive, send_group

pytestmark = pytest.mark.django_db


def _page(group: str = "F", **kw):
    return blocked_message_groups(consumer_group=group, max_delivery_attempts=5, **kw)


@pytest.fixture
def fifo(db):
    fifo_group("F", max_delivery_attempts=5)


def test_a_head_handed_out_again_blocks_its_group_with_its_message_and_what_waits(fifo):
    sent = send_group("order-1", 4)
    [got] = block_heads("F", failures=2)

    page = _page()

    assert page.total == 1
    [b] = page.groups
    head = sent[0]
    assert (b.topic, b.message_group, b.msg_id) == ("Orders", "order-1", head.msg_id)
    assert (b.commit_log_offset, b.queue_id, b.queue_offset) == (
        head.commit_log_offset,
        head.queue_id,
        head.queue_offset,
    )
    assert (b.keys, b.delivery_attempt, b.max_delivery_attempts) == ("order-1-0", 3, 5)
    assert (b.waiting, b.waiting_capped) == (3, False)
    first = DeliveryEvent.objects.get(
        consumer_group="F", msg_id=head.msg_id, kind="delivered", delivery_attempt=1
    )
    assert b.blocked_since == first.timestamp
    assert (
        b.invisible_until_timestamp
        == Delivery.objects.get(consumer_group="F").invisible_until_timestamp
    )
    assert got.message.msg_id == head.msg_id


def test_a_head_in_its_first_hand_out_does_not_block_and_one_nacked_does(fifo):
    send_group("order-1", 2)
    [got] = receive("F")
    assert _page().total == 0  # in flight, attempt 1, not failed
    nack("F", [got])
    [b] = _page().groups  # its invisible time ran out: failed once, not handed out again yet
    assert (b.msg_id, b.delivery_attempt) == (got.message.msg_id, 1)
    # The invisible time that ends later than now is not a failure yet.
    assert _page(now=Delivery.objects.get().invisible_until_timestamp - 1).total == 0


def test_an_acked_head_unblocks_and_an_operator_redelivery_is_not_a_failure(fifo):
    send_group("order-1", 2)
    [got] = block_heads("F")
    messages_ack(consumer_group="F", receipt_handles=[got.receipt_handle])
    assert _page().total == 0
    Delivery.objects.create(
        consumer_group="F",
        message_id=got.message.pk,
        topic="Orders",
        delivery_attempt=0,
        invisible_until_timestamp=0,
        receipt_handle="redelivered-by-an-operator",
    )
    assert _page().total == 0


def test_normal_messages_and_other_groups_deliveries_are_not_message_groups(fifo):
    message_send(topic="Orders", body=b"normal")
    fifo_group("G")
    got = receive("F") + receive("G")
    nack("F", got[:1])
    nack("G", got[1:])
    assert _page().total == 0 and _page("G").total == 0
    assert blocked_message_group_counts() == {}


def test_the_groups_come_oldest_blocked_first_bounded_by_the_page(fifo):
    # a0 b0 c0 a1: the three heads first, so one receive of 3 takes them.
    for name in ("a", "b", "c"):
        send_group(name, 1)
    send_group("a", 1)
    got = block_heads("F", n=3)
    by_group = {g.message.msg_id: g for g in got}
    stamps = {"b": 1_000, "c": 2_000, "a": 3_000}
    for g in by_group.values():
        name = g.message.keys.split("-")[0]
        DeliveryEvent.objects.filter(
            consumer_group="F", msg_id=g.message.msg_id, kind="delivered", delivery_attempt=1
        ).update(timestamp=stamps[name])

    page = _page()
    assert [b.message_group for b in page.groups] == ["b", "c", "a"]
    assert [b.waiting for b in page.groups] == [0, 0, 1]
    short = _page(limit=2)
    assert (short.total, [b.message_group for b in short.groups]) == (3, ["b", "c"])
    [count] = blocked_message_group_counts().values()
    assert (count.consumer_group, count.blocked, count.oldest_since) == ("F", 3, 1_000)
    assert (count.topic, count.message_group) == ("Orders", "b")


def test_the_waiting_count_is_capped(fifo, monkeypatch):
    monkeypatch.setattr(selector, "WAITING_CAP", 2)
    send_group("order-1", 5)
    block_heads("F")
    [b] = _page().groups
    assert (b.waiting, b.waiting_capped) == (2, True)


def test_one_message_group_is_read_by_its_topic_and_name(fifo):
    send_group("order-1", 1)
    send_group("order-2", 1)
    got = block_heads("F", n=2)
    b = blocked_message_group_get(
        consumer_group="F", max_delivery_attempts=5, topic="Orders", message_group="order-2"
    )
    assert b is not None and b.msg_id == got[1].message.msg_id
    assert (
        blocked_message_group_get(
            consumer_group="F", max_delivery_attempts=5, topic="Other", message_group="order-2"
        )
        is None
    )


def test_the_counts_name_only_fifo_groups(fifo):
    send_group("order-1", 1)
    block_heads("F")
    assert blocked_message_group_counts()["F"].blocked == 1
    group = ConsumerGroup.objects.get(name="F")
    group.fifo = False
    group.save()
    assert blocked_message_group_counts(now=now_ms()) == {}


def test_the_list_reads_the_waiting_and_the_first_hand_out_through_their_indexes(fifo):
    send_group("order-1", 2)
    block_heads("F")
    params = {"group": "F", "now": now_ms(), "cap": 1001, "limit": 100}
    params |= {"topic": None, "message_group": None}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {selector._heads_sql(one=False)}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "message_group_order" in plan, plan  # the waiting count: an index range
    assert "delivery_event_message" in plan, plan  # the first hand-out: by commit log offset

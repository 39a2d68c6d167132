"""A receive's filter (TAG and SQL92, RocketMQ's subscriptions): applied by the statement that takes
new messages, so a rejected message gets no delivery row and no journal entry, and counts as
consumed (the group's offset passes it); the group's subscription is recorded; the message
page says "filtered out"."""

from __future__ import annotations

import pytest

from broker.errors import InvalidInput
from broker.models import ConsumerOffset, Delivery, DeliveryEvent, Message, Subscription
from broker.rules.clock import now_ms
from broker.rules.messages import DeliveryState
from broker.selectors.consumer_groups import consumer_group_offsets
from broker.selectors.message_search import message_deliveries
from broker.selectors.subscriptions import groups_filtering_out
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.consumption.subscriptions import MATCH_ALL, subscription_filter
from broker.services.topology.writes import consumer_group_create, topic_create

INVISIBLE = 10_000
TAGS = ["TagA", "TagB", "TagC"]


def _receive(group: str, expression, *, topic: str = "Orders", max_messages: int = 32):
    return messages_receive(
        consumer_group=group,
        topic=topic,
        max_messages=max_messages,
        invisible_duration_ms=INVISIBLE,
        filter_expression=expression,
    )


def _receive_all(group: str, expression, *, max_messages: int = 32) -> list:
    out = []
    while batch := _receive(group, expression, max_messages=max_messages):
        out.extend(batch)
        messages_ack(consumer_group=group, receipt_handles=[r.receipt_handle for r in batch])
    return out


def _tag(expression: str):
    return subscription_filter(type="TAG", expression=expression)


def _sql(expression: str):
    return subscription_filter(type="SQL92", expression=expression)


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=3)
    consumer_group_create(name="billing")
    return [
        message_send(topic="Orders", body=f"m{i}".encode(), tags=TAGS[i % 3]) for i in range(30)
    ]


def _lag(group: str) -> int:
    return sum(o.lag for o in consumer_group_offsets(consumer_group=group))


def test_a_tag_filter_delivers_exactly_its_tags_and_consumes_the_rest(orders):
    got = _receive_all("billing", _tag(" TagA || TagB "))
    wanted = {m.msg_id for m in orders if m.tags in ("TagA", "TagB")}
    assert {r.message.msg_id for r in got} == wanted
    assert len(got) == 20
    # The TagC messages were never handed out, never journalled, and are consumed: no lag.
    tag_c = [m.pk for m in orders if m.tags == "TagC"]
    assert not DeliveryEvent.objects.filter(commit_log_offset__in=tag_c).exists()
    assert not Delivery.objects.filter(message_id__in=tag_c).exists()
    assert _lag("billing") == 0
    # Nothing of them comes back with every message subscribed: they were consumed.
    assert _receive("billing", MATCH_ALL) == []


def test_filtered_receives_keep_each_queue_in_order_and_skip_no_match(orders):
    got = _receive_all("billing", _tag("TagB"), max_messages=1)
    assert [r.message.msg_id for r in got if r.message.queue_id == 0] == [
        m.msg_id for m in orders if m.tags == "TagB" and m.queue_id == 0
    ]
    assert sorted(r.message.pk for r in got) == [m.pk for m in orders if m.tags == "TagB"]


def test_an_sql92_filter_reads_properties_tags_and_keys(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="billing")
    rows = [
        ({"a": "10", "b": "x"}, True),
        ({"a": "5", "b": "x"}, False),  # a > 5 is false
        ({"a": "6", "b": "y"}, False),
        ({"a": "abc", "b": "x"}, False),  # not a number: no match, no error
        ({"b": "x"}, False),  # a missing: NULL, no match
        ({"a": "7", "b": "x"}, True),
        # against an integer literal a value is read as Java's Integer.valueOf reads it
        ({"a": "6.5", "b": "x"}, False),
    ]
    sent = [
        message_send(topic="Orders", body=b"x", properties=props, tags="T") for props, _ in rows
    ]
    got = _receive_all("billing", _sql("a > 5 AND b = 'x'"))
    assert sorted(r.message.pk for r in got) == [
        m.pk for m, (_, match) in zip(sent, rows, strict=True) if match
    ]
    assert _lag("billing") == 0


def test_a_filter_rejecting_a_queues_tail_moves_its_offset_to_the_end(orders):
    _receive_all("billing", _tag("TagA"))
    offsets = {
        o.queue_id: o.offset for o in ConsumerOffset.objects.filter(consumer_group="billing")
    }
    ends = {q: 1 + max(m.queue_offset for m in orders if m.queue_id == q) for q in range(3)}
    assert offsets == ends
    # A message sent after them is taken from there.
    late = message_send(topic="Orders", body=b"late", tags="TagA")
    assert [r.message.pk for r in _receive("billing", _tag("TagA"))] == [late.pk]


def test_a_receive_records_the_groups_subscription(orders):
    _receive("billing", _tag("TagA || TagB"))
    row = Subscription.objects.get(consumer_group="billing", topic="Orders")
    assert (row.expression_type, row.expression) == ("TAG", "TagA || TagB")
    _receive("billing", _sql("a > 1"))
    row.refresh_from_db()
    assert (row.expression_type, row.expression) == ("SQL92", "a > 1")
    assert Subscription.objects.count() == 1


def test_the_message_page_says_where_a_groups_filter_rejected_it(orders):
    consumer_group_create(name="shipping")
    _receive_all("billing", _tag("TagA"))
    _receive("shipping", MATCH_ALL, max_messages=1)
    tag_c = next(m for m in orders if m.tags == "TagC")
    tag_a = next(m for m in orders if m.tags == "TagA")
    assert groups_filtering_out(Message.objects.get(pk=tag_c.pk)) == {"billing"}
    assert groups_filtering_out(Message.objects.get(pk=tag_a.pk)) == set()
    states = {
        d.consumer_group: d.state
        for d in message_deliveries(Message.objects.get(pk=tag_c.pk), now=now_ms())
    }
    assert states["billing"] is DeliveryState.FILTERED_OUT
    assert states["shipping"] is not DeliveryState.FILTERED_OUT


@pytest.mark.parametrize(
    ("expression", "position"),
    [("a >", 4), ("a > 5 AND", 10), ("(a = 1", 7)],
)
def test_a_malformed_sql92_filter_is_refused_naming_the_position(expression, position):
    with pytest.raises(InvalidInput) as caught:
        _sql(expression)
    assert caught.value.code == "illegal_filter_expression"
    assert caught.value.details == {"type": "SQL92", "expression": expression, "position": position}
    assert "position" in caught.value.message

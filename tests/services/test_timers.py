"""Delay and timer messages (RocketMQ 5 TimerMessageStore): stored durably on
RMQ_SYS_WHEEL_TIMER when sent, invisible until due, then moved to their topic by the timer in
one statement; recalled before their time, never delivered; refused past the maximum delay."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from broker.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
)
from broker.errors import Conflict, InvalidInput, NotFound
from broker.models import AuditEntry, Message, ScheduledMessage
from broker.rules.clock import now_ms
from broker.selectors.scheduled_messages import (
    scheduled_counts,
    scheduled_message_list,
    scheduled_message_next_due,
)
from broker.services.consumption.receive import messages_receive
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.timers.recall import recall_handle_read, scheduled_message_recall
from broker.services.timers.schedule import delivery_timestamp_of, message_send_at
from broker.services.topology.writes import consumer_group_create, topic_create

HOUR = 3_600_000


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="billing")


def _receive(topic: str = "Orders") -> list:
    return messages_receive(
        consumer_group="billing", topic=topic, max_messages=32, invisible_duration_ms=10_000
    )


def test_a_future_message_waits_invisible_on_the_timer_topic(orders):
    due = now_ms() + HOUR
    row = message_send_at(
        delivery_timestamp=due, topic="Orders", body=b"cancel order 7", tags="Cancel", keys="o7"
    )
    assert isinstance(row, ScheduledMessage)
    assert (row.state, row.topic, row.delivery_timestamp) == ("SCHEDULED", "Orders", due)
    stored = Message.objects.get(pk=row.commit_log_offset)
    assert stored.topic == TIMER_TOPIC and bytes(stored.body) == b"cancel order 7"
    assert stored.properties[PROPERTY_REAL_TOPIC] == "Orders"
    assert stored.properties[PROPERTY_TIMER_DELIVER_MS] == str(due)
    assert _receive() == []
    assert scheduled_messages_deliver() == 0
    assert scheduled_message_next_due() == due


def test_a_past_or_present_time_is_a_normal_send(orders):
    sent = message_send_at(delivery_timestamp=now_ms() - 5000, topic="Orders", body=b"late")
    assert isinstance(sent, Message) and sent.topic == "Orders"
    assert [bytes(r.message.body) for r in _receive()] == [b"late"]
    assert not ScheduledMessage.objects.exists()


def test_more_than_the_maximum_delay_ahead_is_refused_and_nothing_is_stored(orders, settings):
    settings.HALFMOON_SETTINGS = {**settings.HALFMOON_SETTINGS, "HALFMOON_TIMER_MAX_DELAY_SEC": 60}
    with pytest.raises(InvalidInput) as refused:
        message_send_at(delivery_timestamp=now_ms() + 70_000, topic="Orders", body=b"x")
    assert refused.value.code == "illegal_delivery_time"
    assert refused.value.details["max_delay_seconds"] == 60
    assert not Message.objects.exists()
    assert isinstance(
        message_send_at(delivery_timestamp=now_ms() + 59_000, topic="Orders", body=b"x"),
        ScheduledMessage,
    )


def test_due_messages_move_to_their_topic_once_in_due_order(orders):
    now = now_ms()
    soon = now + HOUR // 2  # far enough ahead that a slow send cannot find it past
    late = message_send_at(delivery_timestamp=soon + 2000, topic="Orders", body=b"b", keys="k2")
    early = message_send_at(
        delivery_timestamp=soon + 1000, topic="Orders", body=b"a", properties={"p": "1"}
    )
    later = message_send_at(delivery_timestamp=now + HOUR, topic="Orders", body=b"c")
    assert scheduled_messages_deliver(now=soon + 999) == 0
    assert scheduled_messages_deliver(now=soon + 2000) == 2
    assert scheduled_messages_deliver(now=soon + 2000) == 0  # never twice
    copies = {bytes(m.body): m for m in Message.objects.filter(topic="Orders")}
    assert set(copies) == {b"a", b"b"}
    assert copies[b"a"].msg_id == early.msg_id and copies[b"a"].properties["p"] == "1"
    assert PROPERTY_REAL_TOPIC not in copies[b"a"].properties
    assert copies[b"b"].keys == "k2"
    rows = {r.pk: r for r in ScheduledMessage.objects.all()}
    assert rows[early.pk].state == rows[late.pk].state == "DELIVERED"
    assert rows[early.pk].delivered_commit_log_offset == copies[b"a"].commit_log_offset
    assert rows[later.pk].state == "SCHEDULED"
    assert sorted(bytes(r.message.body) for r in _receive()) == [b"a", b"b"]
    assert scheduled_counts() == {
        "SCHEDULED": 1,
        "DELIVERED": 2,
        "RECALLED": 0,
        "next_due": now + HOUR,
    }


def test_a_move_that_dies_leaves_the_messages_scheduled_for_the_next(orders):
    due = now_ms() + HOUR
    row = message_send_at(delivery_timestamp=due, topic="Orders", body=b"x")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert scheduled_messages_deliver(now=due + 2000) == 1
        raise RuntimeError("the worker dies mid-move")
    row.refresh_from_db()
    assert row.state == "SCHEDULED"
    assert not Message.objects.filter(topic="Orders").exists()
    assert scheduled_messages_deliver(now=due + 2000) == 1
    assert Message.objects.filter(topic="Orders").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_timers_moving_at_once_deliver_each_message_once():
    topic_create(name="Orders", queue_nums=2)
    now = now_ms()
    for i in range(60):
        message_send_at(delivery_timestamp=now + HOUR + i, topic="Orders", body=f"{i}".encode())
    moved: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def timer() -> None:
        try:
            barrier.wait()
            while n := scheduled_messages_deliver(limit=7, now=now + 2 * HOUR):
                moved.append(n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=timer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(moved) == 60
    bodies = sorted(int(bytes(m.body)) for m in Message.objects.filter(topic="Orders"))
    assert bodies == list(range(60))


def test_a_recalled_message_is_never_delivered_and_a_late_recall_is_refused(orders):
    now = now_ms()
    kept = message_send_at(delivery_timestamp=now + HOUR // 2, topic="Orders", body=b"kept")
    recalled = message_send_at(delivery_timestamp=now + HOUR, topic="Orders", body=b"gone")
    row = scheduled_message_recall(topic="Orders", msg_id=recalled.msg_id, recalled_by="p:1")
    assert (row.state, row.recalled_by) == ("RECALLED", "p:1")
    again = scheduled_message_recall(topic="Orders", msg_id=recalled.msg_id, recalled_by="p:2")
    assert again.recalled_by == "p:1"  # the same recall again: unchanged
    assert scheduled_messages_deliver(now=now + 2 * HOUR) == 1
    assert [bytes(m.body) for m in Message.objects.filter(topic="Orders")] == [b"kept"]
    with pytest.raises(Conflict) as late:
        scheduled_message_recall(topic="Orders", msg_id=kept.msg_id, recalled_by="p:1")
    assert late.value.code == "recall_too_late"
    assert late.value.details["state"] == "DELIVERED"
    with pytest.raises(NotFound):
        scheduled_message_recall(topic="Orders", msg_id="NOPE", recalled_by="p:1")
    assert not AuditEntry.objects.exists()  # a producer's recall is not an operator action


def test_a_recall_once_due_is_refused_even_before_the_move(orders):
    row = message_send_at(delivery_timestamp=now_ms() + HOUR, topic="Orders", body=b"x")
    ScheduledMessage.objects.filter(pk=row.pk).update(delivery_timestamp=now_ms() - 1)
    with pytest.raises(Conflict) as late:
        scheduled_message_recall(topic="Orders", msg_id=row.msg_id, recalled_by="p:1")
    assert late.value.details["state"] == "SCHEDULED"


def test_an_operators_recall_needs_a_reason_and_is_audited(orders):
    row = message_send_at(delivery_timestamp=now_ms() + HOUR, topic="Orders", body=b"x")
    with pytest.raises(InvalidInput) as refused:
        scheduled_message_recall(
            topic="Orders", msg_id=row.msg_id, recalled_by="console:alice", via="console"
        )
    assert refused.value.code == "reason_required"
    scheduled_message_recall(
        topic="Orders",
        msg_id=row.msg_id,
        recalled_by="console:alice",
        via="console",
        reason="order paid after all",
    )
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.reason) == (
        "recall-message",
        "console:alice",
        "order paid after all",
    )
    assert entry.targets.get().commit_log_offset == row.commit_log_offset
    assert scheduled_message_list(state="RECALLED")[0].recall_reason == "order paid after all"


def test_a_resend_with_the_same_msg_id_is_scheduled_once(orders):
    due = now_ms() + HOUR
    first = message_send_at(delivery_timestamp=due, topic="Orders", body=b"x", msg_id="M-1")
    again = message_send_at(delivery_timestamp=due, topic="Orders", body=b"x", msg_id="M-1")
    assert again.pk == first.pk and ScheduledMessage.objects.count() == 1
    ScheduledMessage.objects.filter(pk=first.pk).update(delivery_timestamp=now_ms() - 1)
    late = message_send_at(delivery_timestamp=now_ms() - 1, topic="Orders", body=b"x", msg_id="M-1")
    assert late.pk == first.pk  # its time has come, not yet moved: a retry stores no copy
    assert not Message.objects.filter(topic="Orders").exists()


def test_delay_levels_and_recall_handles(orders):
    assert delivery_timestamp_of(deliver_at=None, delay_level=3, now=1000) == 11_000
    assert delivery_timestamp_of(deliver_at=5, delay_level=None, now=1000) == 5
    with pytest.raises(InvalidInput) as bad:
        delivery_timestamp_of(deliver_at=None, delay_level=19, now=0)
    assert bad.value.code == "illegal_delay_level"
    with pytest.raises(InvalidInput) as both:
        delivery_timestamp_of(deliver_at=5, delay_level=1, now=0)
    assert both.value.code == "delivery_time_conflict"
    with pytest.raises(InvalidInput) as invalid:
        recall_handle_read("Orders", "not a handle")
    assert invalid.value.code == "invalid_recall_handle"


def test_the_list_finds_by_topic_key_and_due_order(orders):
    now = now_ms()
    message_send_at(delivery_timestamp=now + HOUR + 3000, topic="Orders", body=b"x", keys="a b")
    message_send_at(delivery_timestamp=now + HOUR + 1000, topic="Orders", body=b"y", keys="ab")
    assert [r.keys for r in scheduled_message_list()] == ["ab", "a b"]
    assert [r.keys for r in scheduled_message_list(key="b")] == ["a b"]
    assert scheduled_message_list(topic="Other") == []


def test_metrics_show_what_waits_and_the_earliest_due_time(orders):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from broker.metrics import REGISTRY

    def samples() -> dict[str, list[float]]:
        text = generate_latest(REGISTRY).decode()
        return {
            f.name: [s.value for s in f.samples]
            for f in text_string_to_metric_families(text)
            if f.name.startswith("halfmoon_scheduled")
        }

    assert samples() == {
        "halfmoon_scheduled_messages": [0.0],
        "halfmoon_scheduled_next_due_timestamp_seconds": [],
        "halfmoon_scheduled_overdue_messages": [0.0],
    }
    due = now_ms() + HOUR
    message_send_at(delivery_timestamp=due + 5, topic="Orders", body=b"x")
    message_send_at(delivery_timestamp=due, topic="Orders", body=b"y")
    assert samples() == {
        "halfmoon_scheduled_messages": [2.0],
        "halfmoon_scheduled_next_due_timestamp_seconds": [due / 1000],
        "halfmoon_scheduled_overdue_messages": [0.0],
    }
    # The timer is down: one of them is past its time, not yet moved.
    late = message_send_at(delivery_timestamp=due, topic="Orders", body=b"z")
    ScheduledMessage.objects.filter(pk=late.pk).update(delivery_timestamp=now_ms() - 1_000)
    assert samples()["halfmoon_scheduled_overdue_messages"] == [1.0]


def test_a_recall_appends_one_delete_marker_to_the_timer_topic(orders):
    now = now_ms()
    row = message_send_at(
        delivery_timestamp=now + HOUR, topic="Orders", body=b"x", producer_group="shop"
    )
    scheduled_message_recall(topic="Orders", msg_id=row.msg_id, recalled_by="p:1")
    scheduled_message_recall(topic="Orders", msg_id=row.msg_id, recalled_by="p:1")  # again
    kept = message_send_at(delivery_timestamp=now + HOUR, topic="Orders", body=b"y")
    ScheduledMessage.objects.filter(pk=kept.pk).update(delivery_timestamp=now - 1)
    with pytest.raises(Conflict):
        scheduled_message_recall(topic="Orders", msg_id=kept.msg_id, recalled_by="p:1")
    on_timer = Message.objects.filter(topic=TIMER_TOPIC).order_by("commit_log_offset")
    markers = [m for m in on_timer if PROPERTY_TIMER_DEL_UNIQKEY in m.properties]
    assert len(markers) == 1  # once, and none for the refused recall
    (marker,) = markers
    assert marker.msg_id != row.msg_id and bytes(marker.body) == b""
    assert marker.producer_group == "shop"
    assert marker.properties[PROPERTY_TIMER_DEL_UNIQKEY] == f"Orders+{row.msg_id}"
    assert marker.properties[PROPERTY_TIMER_DELIVER_MS] == str(row.delivery_timestamp)
    assert marker.properties[PROPERTY_REAL_TOPIC] == "Orders"
    assert marker.commit_log_offset > row.commit_log_offset
    # The timer moves index rows only: the marker is never delivered anywhere.
    assert scheduled_messages_deliver(now=now + 2 * HOUR) == 1
    assert [bytes(m.body) for m in Message.objects.exclude(topic=TIMER_TOPIC)] == [b"y"]

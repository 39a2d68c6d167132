"""broker.rules.timers: RocketMQ's delay levels, the delivery timestamp of a gRPC message
(with the Python client's milliseconds-in-seconds), the maximum delay, the recall handle and a
scheduled message's timeline."""

from __future__ import annotations

import base64

import pytest

from broker.rules.timers import (
    DELAY_LEVELS_MS,
    SECONDS_AS_MS_ABOVE,
    DeliveryTimeError,
    RecallHandle,
    ScheduleEvent,
    delay_level_ms,
    is_scheduled,
    recall_handle_format,
    recall_handle_of,
    recall_handle_parse,
    schedule_timeline,
    timer_del_uniq_key,
    timestamp_ms,
)


def test_the_eighteen_levels_of_messageDelayLevel():  # noqa: N802 - RocketMQ's name
    assert len(DELAY_LEVELS_MS) == 18
    assert DELAY_LEVELS_MS[:4] == (1000, 5000, 10_000, 30_000)
    assert DELAY_LEVELS_MS[4:14] == tuple(m * 60_000 for m in range(1, 11))
    assert DELAY_LEVELS_MS[14:] == (1_200_000, 1_800_000, 3_600_000, 7_200_000)
    assert delay_level_ms(1) == 1000
    assert delay_level_ms(18) == 7_200_000


@pytest.mark.parametrize("level", [0, 19, -1])
def test_a_level_outside_1_to_18_is_refused(level):
    with pytest.raises(DeliveryTimeError) as refused:
        delay_level_ms(level)
    assert refused.value.code == "illegal_delay_level"
    assert str(refused.value) == f"A delay level is 1 to 18, not {level}."


def test_a_timestamp_in_seconds_and_one_in_milliseconds():
    assert timestamp_ms(1_700_000_000, 250_000_000) == 1_700_000_000_250
    assert timestamp_ms(1_700_000_000, 999_999) == 1_700_000_000_000
    assert timestamp_ms(1_700_000_000_250, 0) == 1_700_000_000_250  # the Python client's
    assert timestamp_ms(SECONDS_AS_MS_ABOVE, 0) == SECONDS_AS_MS_ABOVE * 1000
    assert timestamp_ms(SECONDS_AS_MS_ABOVE + 1, 5_000_000) == SECONDS_AS_MS_ABOVE + 1


def test_past_present_future_and_too_far():
    assert is_scheduled(1001, now=1000, max_delay_ms=10) is True
    assert is_scheduled(1000, now=1000, max_delay_ms=10) is False
    assert is_scheduled(0, now=1000, max_delay_ms=10) is False
    assert is_scheduled(1010, now=1000, max_delay_ms=10) is True
    with pytest.raises(DeliveryTimeError) as refused:
        is_scheduled(1011, now=1000, max_delay_ms=10)
    assert refused.value.code == "illegal_delivery_time"
    with pytest.raises(DeliveryTimeError) as message:
        is_scheduled(5000 + 7000, now=5000, max_delay_ms=3000)
    assert str(message.value) == (
        "A message may be delayed at most 3 s; this one is due 7 s from now."
    )


def test_the_recall_handle_is_rocketmqs_handle_v1():
    handle = RecallHandle("Orders", "halfmoon", 1_700_000_000_123, "ABC")
    text = recall_handle_format(handle)
    assert base64.urlsafe_b64decode(text).decode() == "v1 Orders halfmoon 1700000000123 ABC"
    assert recall_handle_parse(text) == handle


@pytest.mark.parametrize(
    "raw",
    [
        b"v2 Orders halfmoon 1 ABC",
        b"v1 Orders halfmoon 1",
        b"v1 Orders halfmoon 1 ABC extra",
        b"v1 Orders halfmoon soon ABC",
        b"\xff\xfe",
    ],
)
def test_what_is_not_a_v1_handle_is_refused(raw):
    with pytest.raises(ValueError, match="recall handle is invalid"):
        recall_handle_parse(base64.urlsafe_b64encode(raw).decode())


@pytest.mark.parametrize("text", ["%%%", "abc", "é"])
def test_what_is_not_base64_is_refused(text):
    with pytest.raises(ValueError, match="recall handle is invalid"):
        recall_handle_parse(text)


def test_halfmoons_recall_handle_names_its_one_broker():
    text = recall_handle_of(topic="Orders", delivery_timestamp=1_700_000_000_123, msg_id="ABC")
    assert recall_handle_parse(text) == RecallHandle("Orders", "halfmoon", 1_700_000_000_123, "ABC")


SENT = ScheduleEvent(
    "sent",
    1000,
    "Sent: stored on RMQ_SYS_WHEEL_TIMER, invisible to consumers until its time",
    commit_log_offset=7,
)


def timeline(state: str, *, now: int = 2000, ended: int | None = None, **row) -> list:
    fields = {
        "state": state,
        "topic": "Orders",
        "commit_log_offset": 7,
        "scheduled_timestamp": 1000,
        "delivery_timestamp": 5000,
        "ended_timestamp": ended,
        "delivered_commit_log_offset": None,
        "recalled_by": "",
        "recall_reason": "",
        "now": now,
        **row,
    }
    return schedule_timeline(**fields)


def test_a_waiting_messages_timeline_ends_with_its_due_time_ahead():
    assert timeline("SCHEDULED") == [
        SENT,
        ScheduleEvent("due", 5000, "Scheduled for: delivered on Orders then", reached=False),
    ]
    assert timeline("SCHEDULED", now=5000) == [
        SENT,
        ScheduleEvent("due", 5000, "Due: waiting for the timer to move it", reached=True),
    ]


def test_a_delivered_messages_timeline_ends_with_its_delivered_copy():
    assert timeline("DELIVERED", now=9000, ended=5004, delivered_commit_log_offset=99) == [
        SENT,
        ScheduleEvent("due", 5000, "Due"),
        ScheduleEvent(
            "delivered",
            5004,
            "Delivered on Orders: visible to its consumers",
            commit_log_offset=99,
        ),
    ]
    delivered = timeline("DELIVERED", ended=None)[-1]
    assert (delivered.kind, delivered.timestamp) == ("delivered", 5000)


def test_a_recalled_messages_timeline_says_who_and_why_before_a_due_time_never_reached():
    assert timeline(
        "RECALLED", now=9000, ended=3000, recalled_by="console:olga", recall_reason="paid"
    ) == [
        SENT,
        ScheduleEvent(
            "recalled",
            3000,
            "Recalled before its time: never delivered",
            actor="console:olga",
            reason="paid",
        ),
        ScheduleEvent("due", 5000, "Was due: recalled before, not delivered", reached=False),
    ]
    recalled = timeline("RECALLED", ended=None)[1]
    assert (recalled.kind, recalled.timestamp) == ("recalled", 1000)


def test_the_timeline_is_in_time_order():
    events = timeline("RECALLED", ended=6000, scheduled_timestamp=4000)
    assert [e.kind for e in events] == ["sent", "due", "recalled"]


def test_an_event_without_a_recall_or_a_copy_has_none():
    due = timeline("SCHEDULED")[-1]
    assert (due.actor, due.reason, due.commit_log_offset) == ("", "", None)
    assert timeline("DELIVERED")[1].reached is True


def test_a_recalls_delete_key_is_rocketmqs_topic_plus_uniq_key():
    assert timer_del_uniq_key("Orders", "7F0000010001") == "Orders+7F0000010001"

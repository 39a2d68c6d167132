"""The offset reset plan (broker.rules.offset_resets): per queue back, forward or none, and
a forward move never below the offset held."""

from __future__ import annotations

from broker.rules.offset_resets import (
    QueuePosition,
    offset_forwarded,
    offset_reset_plan,
    plan_totals,
    reset_target,
)


def test_the_target_is_the_first_offset_at_the_time_or_the_queue_end():
    assert reset_target(first_at_time=7, queue_end=20) == 7
    assert reset_target(first_at_time=None, queue_end=20) == 20


def test_each_queue_goes_back_forward_or_stays_and_counts_what_it_changes():
    plans = offset_reset_plan(
        [
            QueuePosition("T", 1, current=10, target=14, messages_between=4),
            QueuePosition("T", 0, current=10, target=4, messages_between=6),
            QueuePosition("A", 0, current=3, target=3, messages_between=0),
        ]
    )
    assert [(p.topic, p.queue_id, p.direction) for p in plans] == [
        ("A", 0, "none"),
        ("T", 0, "back"),
        ("T", 1, "forward"),
    ]
    assert (plans[1].redeliver, plans[1].skip, plans[1].new) == (6, 0, 4)
    assert (plans[2].redeliver, plans[2].skip, plans[2].new) == (0, 4, 14)
    assert plan_totals(plans) == (6, 4)
    assert plan_totals([p.as_json() for p in plans]) == (6, 4)


def test_a_forward_reset_never_moves_an_offset_back():
    assert offset_forwarded(held=5, new=9) == 9
    assert offset_forwarded(held=12, new=9) == 12


def test_totals_add_every_queue_and_each_plan_keeps_where_the_queue_was():
    plans = offset_reset_plan(
        [
            QueuePosition("T", 0, current=2, target=5, messages_between=3),
            QueuePosition("T", 1, current=1, target=8, messages_between=7),
            QueuePosition("T", 2, current=9, target=6, messages_between=3),
            QueuePosition("T", 3, current=9, target=1, messages_between=8),
        ]
    )

    assert plan_totals(plans) == (11, 10)
    assert [(p.current, p.new) for p in plans] == [(2, 5), (1, 8), (9, 6), (9, 1)]
    assert [p.as_json()["current"] for p in plans] == [2, 1, 9, 9]

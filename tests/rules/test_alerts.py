"""Halfmoon's own alert rules (broker.rules.alerts): when each kind fires, and the state
machine that sends one notification each way. Plain values only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from broker.rules.alerts import (
    KINDS,
    THRESHOLD_MAX,
    WINDOW_S_MAX,
    WINDOW_S_MIN,
    AlertKind,
    Finding,
    NotificationEvent,
    Step,
    alert_step,
    discard_rate_finding,
    dlq_growing_finding,
    fifo_blocked_finding,
    near_check_max_finding,
    oldest_pending_finding,
    rate_per_hour,
    scheduled_overdue_finding,
    unreachable_finding,
)

NOW = 1_800_000_000_000
ALERTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"
FIRING, REMINDER, RESOLVED = (
    NotificationEvent.FIRING,
    NotificationEvent.REMINDER,
    NotificationEvent.RESOLVED,
)


def test_every_kind_has_a_spec_and_a_runbook_section():
    assert set(KINDS) == set(AlertKind)
    for spec in KINDS.values():
        assert spec.runbook_url.startswith("docs/alerts.md#")
        assert spec.uses_window == (spec.default_window_s > 0)


def test_the_kinds_defaults_are_the_ones_the_runbook_documents():
    # docs/alerts.md's table: | `kind` | ... `window_s` (W) ... | unit (threshold) | [..](#anchor) |
    rows = re.findall(
        r"^\| `(\w+)` \| ([^|]*) \| ([^|(]+) \((\d+)\) \| \[[^]]*\]\(#([\w-]+)\) \|$",
        ALERTS_DOC.read_text(),
        re.MULTILINE,
    )
    documented = {
        kind: (unit.strip(), int(threshold), int(window[0]) if window else 0, anchor)
        for kind, when, unit, threshold, anchor in rows
        for window in [re.findall(r"`window_s` \((\d+)\)", when)]
    }
    assert documented == {
        kind: (spec.threshold_unit, spec.default_threshold, spec.default_window_s, spec.anchor)
        for kind, spec in KINDS.items()
    }
    assert KINDS[AlertKind.OLDEST_PENDING].default_threshold == 600
    assert KINDS[AlertKind.DISCARD_RATE].default_window_s == 3600


def test_a_dead_letter_alert_is_about_a_consumer_group_the_others_a_producer_group():
    assert {kind: spec.subject for kind, spec in KINDS.items()} == {
        AlertKind.OLDEST_PENDING: "producer_group",
        AlertKind.NEAR_CHECK_MAX: "producer_group",
        AlertKind.GROUP_UNREACHABLE: "producer_group",
        AlertKind.DISCARD_RATE: "producer_group",
        AlertKind.DLQ_GROWING: "consumer_group",
        AlertKind.FIFO_BLOCKED: "consumer_group",
        AlertKind.SCHEDULED_OVERDUE: "topic",
    }


def test_a_window_spans_a_second_to_a_week_and_a_threshold_up_to_a_billion():
    assert (WINDOW_S_MIN, WINDOW_S_MAX) == (1, 604_800)
    assert THRESHOLD_MAX == 1_000_000_000


def test_oldest_pending_fires_only_past_the_threshold():
    def at(age_ms: int):
        return oldest_pending_finding(
            "G",
            born_timestamp=NOW - age_ms,
            pending=3,
            transaction_id="TX1",
            threshold_s=60,
            now=NOW,
        )

    assert at(60_000) is None  # exactly 60 s: not older than 60 s
    found = at(60_001)
    assert found is not None and found.subject == "G" and found.value == 60.001
    assert "3 pending in G" in found.summary and "TX1" in found.summary


def test_oldest_pending_says_how_many_are_pending_and_for_how_long():
    found = oldest_pending_finding(
        "G",
        born_timestamp=NOW - 1_500_000,
        pending=3,
        transaction_id="TX1",
        threshold_s=1200,
        now=NOW,
    )
    assert found == Finding(
        "G", 1500.0, "3 pending in G; the oldest, TX1, for 25 min (over 20 min)"
    )


def test_a_transaction_born_after_now_is_not_older_than_a_zero_threshold():
    assert (
        oldest_pending_finding(
            "G", born_timestamp=NOW + 5, pending=1, transaction_id="TX1", threshold_s=0, now=NOW
        )
        is None
    )


@pytest.mark.parametrize(
    ("histogram", "checks_left", "expected"),
    [
        ({0: 5, 1: 2}, 1, None),  # check max 3: at risk from 2 checks
        ({0: 5, 2: 2}, 1, 2.0),
        ({3: 1}, 0, 1.0),  # at the max, waiting for its discard
        ({2: 1}, 0, None),
        ({0: 4}, 5, 4.0),  # more left than the max: every pending one
        ({1: 0, 2: 0}, 1, None),  # empty counts
    ],
)
def test_near_check_max_counts_the_transactions_within_k_checks(histogram, checks_left, expected):
    found = near_check_max_finding(
        "G", check_histogram=histogram, check_max=3, checks_left=checks_left
    )

    assert (found.value if found else None) == expected


def test_near_check_max_names_the_most_checked_pending_transaction():
    found = near_check_max_finding(
        "G", check_histogram={0: 5, 2: 1, 7: 0}, check_max=3, checks_left=1
    )
    assert found == Finding(
        "G",
        1.0,
        "1 pending in G within 1 checks of the check max (the most checked: 2 of 3; "
        "discarded at 3)",
    )


def test_unreachable_without_an_error_says_only_how_long():
    found = unreachable_finding(
        "G", down_since=NOW - 30_000, last_error="", threshold_s=30, now=NOW
    )
    assert found == Finding("G", 30.0, "checks to G not answered for 30 s")


def test_a_zero_threshold_fires_at_once_on_an_unreachable_group():
    found = unreachable_finding("G", down_since=NOW, last_error="", threshold_s=0, now=NOW)
    assert found == Finding("G", 0.0, "checks to G not answered for 0 ms")


def test_unreachable_fires_after_the_threshold_and_names_the_error():
    assert unreachable_finding("G", down_since=None, last_error="", threshold_s=0, now=NOW) is None
    assert (
        unreachable_finding("G", down_since=NOW - 29_999, last_error="", threshold_s=30, now=NOW)
        is None
    )
    found = unreachable_finding(
        "G", down_since=NOW - 30_000, last_error="ConnectError: refused", threshold_s=30, now=NOW
    )
    assert found is not None and found.value == 30.0
    assert found.summary == "checks to G not answered for 30 s: ConnectError: refused"


def test_discard_rate_is_per_hour_over_the_window():
    assert rate_per_hour(2, 600) == 12.0
    assert discard_rate_finding("G", discards=2, window_s=600, per_hour=12) is None  # not over
    found = discard_rate_finding("G", discards=3, window_s=600, per_hour=12)
    assert found is not None and found.value == 18.0


def test_discard_rate_says_how_many_over_which_window():
    found = discard_rate_finding("G", discards=9, window_s=1200, per_hour=12)
    assert found == Finding(
        "G", 27.0, "9 transactions of G discarded in the last 20 min (27 per hour, over 12)"
    )


def test_dlq_growing_says_how_many_moved_to_the_dead_letter_topic():
    found = dlq_growing_finding("C", dead_letters=3, window_s=1200, threshold=2)
    assert found == Finding(
        "C", 3.0, "3 messages of consumer group C moved to %DLQ%C in the last 20 min"
    )


def test_dlq_growing_fires_above_the_threshold():
    assert dlq_growing_finding("C", dead_letters=0, window_s=60, threshold=0) is None
    assert dlq_growing_finding("C", dead_letters=2, window_s=60, threshold=2) is None
    found = dlq_growing_finding("C", dead_letters=3, window_s=60, threshold=2)
    assert found is not None and "%DLQ%C" in found.summary


def test_fifo_blocked_says_how_many_and_the_oldest_for_how_long():
    found = fifo_blocked_finding(
        "F", blocked=2, oldest_since=1_000, message_group="order-7", threshold_s=300, now=601_000
    )
    assert found == Finding(
        "F",
        600.0,
        "2 message groups of FIFO consumer group F blocked; the oldest, order-7, for 10 min "
        "(over 5 min)",
    )


def test_fifo_blocked_fires_only_past_the_threshold_and_a_known_start():
    def at(now: int, since: int | None = 0) -> Finding | None:
        return fifo_blocked_finding(
            "F", blocked=1, oldest_since=since, message_group="g", threshold_s=60, now=now
        )

    assert at(60_000) is None  # exactly the threshold: not past it
    assert at(60_001) is not None and at(60_001).value == 60.001
    assert at(60_001, since=None) is None  # the journal no longer says since when
    assert at(0, since=5_000) is None  # a clock behind the start: age 0
    zero = fifo_blocked_finding(
        "F", blocked=1, oldest_since=10, message_group="g", threshold_s=0, now=9
    )
    assert zero is None


def step(**kwargs) -> Step:
    values = {
        "was_firing": False,
        "firing": False,
        "silenced": False,
        "notified": False,
        "last_notified_timestamp": None,
        "repeat_interval_ms": 0,
        "now": NOW,
    }
    values.update(kwargs)
    return alert_step(**values)


def test_a_new_alert_notifies_once_unless_silenced():
    assert step(firing=True) == Step(True, FIRING)
    assert step(firing=True, silenced=True) == Step(True, None)
    assert step() == Step(False, None)


def test_a_firing_alert_repeats_nothing_until_its_reminder_is_due():
    firing = {"was_firing": True, "firing": True, "notified": True}
    assert step(**firing, last_notified_timestamp=NOW - 59_999, repeat_interval_ms=60_000) == Step(
        True, None
    )
    assert step(**firing, last_notified_timestamp=NOW - 60_000, repeat_interval_ms=60_000) == Step(
        True, REMINDER
    )
    assert step(**firing, last_notified_timestamp=NOW - 10**9, repeat_interval_ms=0) == Step(True)


def test_a_one_millisecond_repeat_interval_reminds_every_millisecond():
    firing = {"was_firing": True, "firing": True, "notified": True}
    assert step(**firing, last_notified_timestamp=NOW - 1, repeat_interval_ms=1) == Step(
        True, REMINDER
    )
    assert step(**firing, last_notified_timestamp=NOW, repeat_interval_ms=1) == Step(True, None)


def test_a_silence_holds_reminders_and_its_end_notifies_a_never_notified_alert():
    firing = {"was_firing": True, "firing": True}
    assert step(
        **firing, notified=True, silenced=True, last_notified_timestamp=0, repeat_interval_ms=1
    ) == Step(True, None)
    assert step(**firing, notified=False, silenced=True) == Step(True, None)
    assert step(**firing, notified=False, silenced=False) == Step(True, FIRING)


def test_a_resolution_is_notified_exactly_when_the_firing_was():
    assert step(was_firing=True, notified=True) == Step(False, RESOLVED)
    assert step(was_firing=True, notified=True, silenced=True) == Step(False, RESOLVED)
    assert step(was_firing=True, notified=False) == Step(False, None)


def test_scheduled_overdue_fires_only_past_the_threshold_with_messages_waiting():
    due = NOW - 61_000
    assert scheduled_overdue_finding(
        "Orders", overdue=3, oldest_due_timestamp=due, threshold_s=60, now=NOW
    ) == Finding(
        "Orders",
        61.0,
        "3 scheduled messages of topic Orders not delivered more than 1 min after their time; "
        "the oldest due 1 min 1 s ago",
    )
    # Exactly at the threshold: not yet.
    assert (
        scheduled_overdue_finding(
            "Orders", overdue=3, oldest_due_timestamp=NOW - 60_000, threshold_s=60, now=NOW
        )
        is None
    )
    assert (
        scheduled_overdue_finding(
            "Orders", overdue=0, oldest_due_timestamp=due, threshold_s=60, now=NOW
        )
        is None
    )
    assert scheduled_overdue_finding(
        "Orders", overdue=1, oldest_due_timestamp=NOW - 1, threshold_s=0, now=NOW
    ) == Finding(
        "Orders",
        0.001,
        "1 scheduled messages of topic Orders not delivered more than 0 ms after their time; "
        "the oldest due 1 ms ago",
    )
    assert KINDS[AlertKind.SCHEDULED_OVERDUE].default_threshold == 60

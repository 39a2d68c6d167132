"""Halfmoon's own alert rules (broker.rules.alerts): when each kind fires, and the state
machine that sends one notification each way. Plain values only."""

from __future__ import annotations

import pytest

from broker.rules.alerts import (
    KINDS,
    AlertKind,
    NotificationEvent,
    Step,
    alert_step,
    discard_rate_finding,
    dlq_growing_finding,
    near_check_max_finding,
    oldest_pending_finding,
    rate_per_hour,
    unreachable_finding,
)

NOW = 1_800_000_000_000
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


def test_dlq_growing_fires_above_the_threshold():
    assert dlq_growing_finding("C", dead_letters=0, window_s=60, threshold=0) is None
    assert dlq_growing_finding("C", dead_letters=2, window_s=60, threshold=2) is None
    found = dlq_growing_finding("C", dead_letters=3, window_s=60, threshold=2)
    assert found is not None and "%DLQ%C" in found.summary


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

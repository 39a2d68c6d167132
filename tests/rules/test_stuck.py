"""Why a transaction is stuck, and how times read: plain values only."""

from broker.rules.durations import duration_text, relative_text
from broker.rules.stuck import stuck_reason

BASE = dict(
    state="PREPARED",
    discard_reason="",
    check_times=0,
    check_max=15,
    last_answer="",
    next_check_timestamp=None,
    group_unreachable_since=None,
    group_backoff_until=None,
    now=10_000,
)


def reason(**changes):
    return stuck_reason(**{**BASE, **changes})


def test_a_discard_without_a_known_reason_says_so():
    assert reason(state="DISCARDED", discard_reason="") == "discarded: unknown reason"
    assert reason(state="DISCARDED", discard_reason="by hand") == "discarded: by hand"


def test_discarded_says_why():
    assert reason(state="DISCARDED", discard_reason="check_max", check_times=15) == (
        "discarded: check_max (15 of 15 checks, no end)"
    )
    assert reason(state="DISCARDED", discard_reason="file_reserved_time").startswith(
        "discarded: file_reserved_time"
    )


def test_an_unreachable_group_comes_before_the_last_answer():
    assert reason(group_unreachable_since=5, last_answer="UNKNOW").startswith(
        "producer group unreachable"
    )
    assert reason(group_backoff_until=20_000, last_answer="TIMEOUT").startswith(
        "producer group backed off"
    )
    assert reason(group_backoff_until=5_000, last_answer="TIMEOUT").startswith("check timed out")


def test_a_backoff_ending_now_is_over():
    assert reason(group_backoff_until=10_000, last_answer="TIMEOUT").startswith("check timed out")


def test_a_first_check_due_now_is_due_not_waiting():
    assert reason(next_check_timestamp=10_000) == "first check due, not sent yet"
    assert reason(next_check_timestamp=10_001) == "waiting for the first check (check immunity)"


def test_the_last_answer_then_the_first_check():
    assert reason(check_times=3, last_answer="UNKNOW") == "producer answers UNKNOW"
    assert reason(next_check_timestamp=20_000) == "waiting for the first check (check immunity)"
    assert reason(next_check_timestamp=5_000) == "first check due, not sent yet"
    assert reason(check_times=1, last_answer="") == "no check answer yet"
    assert reason(state="COMMITTED") == ""


def test_durations_read_in_two_units_without_skipping_one():
    assert duration_text(850) == "850 ms"
    assert duration_text(12_000) == "12 s"
    assert duration_text(185_000) == "3 min 5 s"
    assert duration_text(2 * 3_600_000 + 5 * 60_000 + 7000) == "2 h 5 min"
    assert duration_text(2 * 3_600_000 + 7000) == "2 h"
    assert duration_text(-12_000) == "12 s"


def test_a_duration_reaches_its_unit_exactly_at_the_units_size():
    assert duration_text(999) == "999 ms"
    assert duration_text(1000) == "1 s"
    assert duration_text(60_000) == "1 min"
    assert duration_text(3_600_000) == "1 h"
    assert duration_text(86_400_000) == "1 d"


def test_long_durations_read_in_days_and_hours():
    assert duration_text(4 * 86_400_000 + 3_600_000 + 60_000) == "4 d 1 h"
    assert duration_text(2 * 86_400_000 + 60_000) == "2 d"


def test_relative_times():
    assert relative_text(1_000, 181_000) == "3 min ago"
    assert relative_text(13_000, 1_000) == "in 12 s"
    assert relative_text(1_000, 1_500) == "now"


def test_a_second_away_is_no_longer_now():
    assert relative_text(1_000, 1_999) == "now"
    assert relative_text(1_000, 2_000) == "1 s ago"
    assert relative_text(2_000, 1_000) == "in 1 s"
    assert relative_text(2_001, 1_000) == "in 1 s"

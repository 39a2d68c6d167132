"""Check immunity, needDiscard, needSkip, backoff and the lease length: plain values only."""

import pytest

from broker.rules.checks import (
    MAX_CHECK_IMMUNITY_SECONDS,
    backoff_ms,
    check_answered,
    check_immunity_ms,
    check_immunity_valid,
    discard_reason,
    first_check_timestamp,
    group_down_since,
    need_discard,
    need_skip,
    next_check_after_check,
    scan_lease_ttl_ms,
)
from broker.rules.states import DiscardReason

HOUR_MS = 3_600_000


def test_immunity_defaults_to_the_transaction_timeout_and_only_lengthens_it():
    assert check_immunity_ms(transaction_timeout_ms=6000, immunity_seconds=None) == 6000
    assert check_immunity_ms(transaction_timeout_ms=6000, immunity_seconds=2) == 6000
    assert check_immunity_ms(transaction_timeout_ms=6000, immunity_seconds=60) == 60_000
    assert (
        first_check_timestamp(born_timestamp=1000, transaction_timeout_ms=6000, immunity_seconds=0)
        == 7000
    )


@pytest.mark.parametrize(
    ("seconds", "valid"), [(-1, False), (0, True), (3600, True), (3601, False)]
)
def test_immunity_bounds_follow_rocketmq_5_proxy(seconds, valid):
    assert MAX_CHECK_IMMUNITY_SECONDS == 3600
    assert check_immunity_valid(seconds) is valid


def test_need_discard_at_the_check_max():
    assert not need_discard(14, transaction_check_max=15)
    assert need_discard(15, transaction_check_max=15)


def test_need_skip_past_the_file_reserved_time():
    assert not need_skip(0, now=72 * HOUR_MS, file_reserved_hours=72)
    assert need_skip(0, now=72 * HOUR_MS + 1, file_reserved_hours=72)


def test_need_skip_counts_the_age_from_the_birth_not_from_the_epoch():
    born = 1_700_000_000_000
    assert not need_skip(born, now=born + 72 * HOUR_MS, file_reserved_hours=72)
    assert need_skip(born, now=born + 72 * HOUR_MS + 1, file_reserved_hours=72)


def test_discard_reason_checks_the_reserved_time_first():
    kwargs = {"transaction_check_max": 15, "file_reserved_hours": 1}
    assert discard_reason(check_times=0, born_timestamp=0, now=1, **kwargs) is None
    assert (
        discard_reason(check_times=15, born_timestamp=0, now=1, **kwargs) == DiscardReason.CHECK_MAX
    )
    assert (
        discard_reason(check_times=15, born_timestamp=0, now=HOUR_MS + 1, **kwargs)
        == DiscardReason.FILE_RESERVED_TIME
    )


def test_backoff_doubles_from_the_base_up_to_the_cap():
    delays = [backoff_ms(n, base_ms=1000, cap_ms=30_000) for n in range(0, 8)]
    assert delays == [1000, 1000, 2000, 4000, 8000, 16000, 30000, 30000]
    assert backoff_ms(10_000, base_ms=1000, cap_ms=10**12) == 1000 * 2**20


def test_next_check_is_one_interval_after_the_last():
    assert next_check_after_check(5000, check_interval_ms=30_000) == 35_000


def test_scan_lease_is_half_the_interval_within_bounds():
    assert scan_lease_ttl_ms(check_interval_ms=30_000, scan_interval_ms=1000) == 15_000
    assert scan_lease_ttl_ms(check_interval_ms=1000, scan_interval_ms=1000) == 1000
    assert scan_lease_ttl_ms(check_interval_ms=600_000, scan_interval_ms=1000) == 60_000


def test_the_scan_lease_of_an_odd_interval_is_whole_milliseconds():
    lease = scan_lease_ttl_ms(check_interval_ms=30_001, scan_interval_ms=1000)
    assert lease == 15_000 and isinstance(lease, int)


def test_a_group_is_down_since_the_earlier_of_undelivered_and_unanswered():
    assert group_down_since(unreachable_since=None, unanswered_since=None) is None
    assert group_down_since(unreachable_since=5000, unanswered_since=None) == 5000
    assert group_down_since(unreachable_since=None, unanswered_since=7000) == 7000
    assert group_down_since(unreachable_since=9000, unanswered_since=7000) == 7000


@pytest.mark.parametrize(
    ("outcome", "answered"),
    [
        ("COMMIT_MESSAGE", True),
        ("ROLLBACK_MESSAGE", True),
        ("UNKNOW", True),
        ("ACCEPTED", True),
        ("INVALID", True),
        ("", True),  # handed to a polling producer
        ("TIMEOUT", False),
    ],
)
def test_a_delivered_check_is_answered_unless_it_timed_out(outcome, answered):
    assert check_answered(outcome) is answered

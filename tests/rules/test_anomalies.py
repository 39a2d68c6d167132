"""The reconciliation's pure rules (``broker.rules.anomalies``): when a transaction must have
settled, the 10-minute buckets, valid archive segment lengths, the anomaly kinds."""

from __future__ import annotations

import pytest

from broker.rules.anomalies import (
    BUCKET_MS,
    HOUR_MS,
    AnomalyKind,
    ReconcileParams,
    bucket_start,
    scheduled_grace_ms,
    scheduled_undelivered,
    segment_ms_valid,
    settle_ms,
)


def params(**overrides: int) -> ReconcileParams:
    values = {
        "since_ms": 0,
        "until_ms": HOUR_MS,
        "as_of_ms": 2 * HOUR_MS,
        "transaction_check_max": 15,
        "transaction_check_interval_ms": 30_000,
        "transaction_timeout_ms": 6_000,
        "file_reserved_ms": 72 * HOUR_MS,
        "visibility_sla_ms": 1_000,
        "check_scan_interval_ms": 10_000,
    }
    return ReconcileParams(**{**values, **overrides})


def test_settle_time_with_rocketmq_defaults():
    # Immunity 6 s, 15 checks 30 s apart and the discarding scan's interval, two scans of slack.
    assert settle_ms(params()) == 6_000 + 16 * 30_000 + 2 * 10_000
    assert params().settle_ms == settle_ms(params())


@pytest.mark.parametrize(
    ("change", "grows_by"),
    [
        ({"transaction_check_max": 16}, 30_000),
        ({"transaction_check_interval_ms": 31_000}, 16 * 1_000),
        ({"transaction_timeout_ms": 7_000}, 1_000),
        ({"check_scan_interval_ms": 11_000}, 2_000),
        ({"file_reserved_ms": HOUR_MS, "visibility_sla_ms": 5}, 0),
    ],
)
def test_settle_time_follows_the_check_settings_only(change, grows_by):
    assert settle_ms(params(**change)) - settle_ms(params()) == grows_by


@pytest.mark.parametrize(
    ("timestamp", "start"),
    [(0, 0), (BUCKET_MS - 1, 0), (BUCKET_MS, BUCKET_MS), (1_700_000_123_456, 1_699_999_800_000)],
)
def test_bucket_start(timestamp, start):
    assert bucket_start(timestamp) == start
    assert BUCKET_MS == 600_000


@pytest.mark.parametrize(
    ("segment_ms", "valid"),
    [
        (600_000, True),
        (HOUR_MS, True),
        (60_000, True),
        (1, True),  # a millisecond divides an hour too
        (7 * 60_000, False),
        (2 * HOUR_MS, False),
        (0, False),
        (-600_000, False),
    ],
)
def test_segments_never_span_two_hours(segment_ms, valid):
    assert segment_ms_valid(segment_ms) is valid


def test_the_eleven_kinds():
    assert AnomalyKind.values == [
        "hanging",
        "lost_commit",
        "rolled_back_but_delivered",
        "orphan_delivery",
        "double_resolution",
        "duplicate_delivery",
        "late_end",
        "undelivered_to_group",
        "slow_visibility",
        "bucket_mismatch",
        "scheduled_undelivered",
    ]


def test_a_scheduled_messages_grace_is_the_settle_time():
    assert scheduled_grace_ms(params()) == settle_ms(params()) == 506_000
    assert scheduled_grace_ms(params(check_scan_interval_ms=20_000)) == 526_000


@pytest.mark.parametrize(
    ("due", "delivered", "recalled", "until", "undelivered"),
    [
        (0, False, False, HOUR_MS, True),  # due at the window's start
        (HOUR_MS - 1, False, False, HOUR_MS, True),  # its last millisecond
        (HOUR_MS, False, False, HOUR_MS, False),  # the next window's
        (-1, False, False, HOUR_MS, False),  # the previous window's
        (100, True, False, HOUR_MS, False),  # delivered
        (100, False, True, HOUR_MS, False),  # recalled
        (100, True, True, HOUR_MS, False),
        # Due within the window, but its grace has not passed by as_of (2 h).
        (2 * HOUR_MS - 506_000, False, False, 2 * HOUR_MS, True),
        (2 * HOUR_MS - 505_999, False, False, 2 * HOUR_MS, False),
    ],
)
def test_a_scheduled_message_undelivered_after_its_grace(
    due, delivered, recalled, until, undelivered
):
    assert (
        scheduled_undelivered(
            due, delivered=delivered, recalled=recalled, params=params(until_ms=until)
        )
        is undelivered
    )

"""The next check's prediction, reasons, outcome and warnings: plain values only."""

import dataclasses

import pytest

from broker.rules import check_explanation as ce
from broker.rules.check_explanation import (
    CheckSettings,
    GroupState,
    PendingCheck,
    SourcedValue,
    explain_check,
    immunity_value,
    settings_warnings,
    source_of,
)

HOUR_MS = 3_600_000
NOW = 10 * HOUR_MS


def _settings(**changes):
    base = CheckSettings(
        transaction_timeout_ms=SourcedValue(6000, "default"),
        check_interval_ms=SourcedValue(30_000, "default"),
        check_max=SourcedValue(15, "default"),
        file_reserved_hours=SourcedValue(72, "default"),
        undelivered_backoff_ms=SourcedValue(1000, "setting"),
        group_max_in_flight=SourcedValue(16, "default"),
        group_max_per_second=SourcedValue(100, "default"),
        scan_interval_ms=1000,
    )
    return dataclasses.replace(base, **changes)


def _tx(**changes):
    base = PendingCheck(
        resolved=False,
        born_timestamp=NOW - 1000,
        check_times=0,
        next_check_timestamp=NOW + 5000,
        last_check_timestamp=None,
        undelivered_checks=0,
        immunity_seconds=None,
    )
    return dataclasses.replace(base, **changes)


def _explain(tx=None, *, settings=None, group=None, now=NOW):
    return explain_check(
        now=now, settings=settings or _settings(), group=group or GroupState(), tx=tx
    )


def test_source_tells_the_default_from_a_setting():
    assert source_of(6000, 6000) == "default"
    assert source_of(6001, 6000) == "setting"
    assert ce.SOURCE_DEFAULT == "default"
    assert ce.SOURCE_SETTING == "setting"
    assert ce.SOURCE_PROPERTY == "message property"


def test_immunity_comes_from_the_property_only_when_longer_than_the_timeout():
    settings = _settings(transaction_timeout_ms=SourcedValue(6000, "setting"))
    assert immunity_value(settings, None) == SourcedValue(6000, "setting")
    assert immunity_value(settings, 6) == SourcedValue(6000, "setting")
    assert immunity_value(settings, 7) == SourcedValue(7000, "message property")


def test_first_check_waits_for_the_transaction_timeout():
    e = _explain(_tx())
    assert e.predicted_timestamp == NOW + 5000
    assert e.reasons == ("transaction_timeout",)
    assert e.outcome == "check"
    assert e.warnings == ()
    assert e.down_since is None
    assert e.values["check_immunity_ms"] == SourcedValue(6000, "default")


def test_first_check_waits_for_the_check_immunity_property():
    e = _explain(_tx(immunity_seconds=60, next_check_timestamp=NOW + 59_000))
    assert e.predicted_timestamp == NOW + 59_000
    assert e.reasons == ("check_immunity",)
    assert e.values["check_immunity_ms"] == SourcedValue(60_000, "message property")


def test_a_checked_transaction_waits_for_the_interval():
    e = _explain(_tx(check_times=2, last_check_timestamp=NOW - 1000, next_check_timestamp=NOW + 1))
    assert e.reasons == ("check_interval",)
    assert e.predicted_timestamp == NOW + 1


def test_an_undelivered_check_waits_for_its_backoff():
    e = _explain(
        _tx(undelivered_checks=3, last_check_timestamp=NOW - 1, next_check_timestamp=NOW + 4000)
    )
    assert e.reasons == ("undelivered_backoff",)
    assert e.values["undelivered_backoff_now_ms"] == SourcedValue(4000, "setting")
    assert "undelivered_backoff_now_ms" not in _explain(_tx()).values
    once = _explain(
        _tx(undelivered_checks=1, last_check_timestamp=None, next_check_timestamp=NOW + 1000)
    )
    assert once.reasons == ("undelivered_backoff",)
    assert once.values["undelivered_backoff_now_ms"] == SourcedValue(1000, "setting")


def test_a_due_check_waits_for_the_next_scan():
    assert _explain(_tx(next_check_timestamp=NOW)).reasons == ("transaction_timeout", "due")
    e = _explain(_tx(next_check_timestamp=NOW - 500))
    assert e.predicted_timestamp == NOW
    assert e.reasons == ("transaction_timeout", "due")
    assert _explain(_tx(next_check_timestamp=NOW + 1)).reasons == ("transaction_timeout",)


def test_the_group_backoff_delays_the_check_only_when_later():
    group = GroupState(check_failures=2, check_backoff_until=NOW + 5001)
    e = _explain(_tx(), group=group)
    assert e.predicted_timestamp == NOW + 5001
    assert e.reasons == ("transaction_timeout", "group_backoff")
    assert e.values["group_backoff_ms"] == SourcedValue(2000, "setting")
    same = _explain(_tx(), group=GroupState(check_backoff_until=NOW + 5000))
    assert same.predicted_timestamp == NOW + 5000
    assert same.reasons == ("transaction_timeout",)


def test_the_group_in_flight_cap_costs_one_scan_per_cap():
    settings = _settings(group_max_in_flight=SourcedValue(2, "setting"), scan_interval_ms=3000)
    assert _explain(_tx(due_ahead_in_queue=1), settings=settings).predicted_timestamp == NOW + 5000
    e = _explain(_tx(due_ahead_in_queue=2), settings=settings)
    assert e.predicted_timestamp == NOW + 8000
    assert e.reasons == ("transaction_timeout", "group_in_flight_cap")
    assert (
        _explain(_tx(due_ahead_in_queue=5), settings=settings).predicted_timestamp == NOW + 11_000
    )


def test_the_group_rate_cap_costs_one_second_per_cap():
    settings = _settings(group_max_per_second=SourcedValue(3, "setting"), scan_interval_ms=1000)
    assert _explain(_tx(due_ahead_in_group=2), settings=settings).reasons == (
        "transaction_timeout",
    )
    one = _explain(_tx(due_ahead_in_group=3), settings=settings)
    assert one.reasons == ("transaction_timeout", "group_rate_cap")
    assert one.predicted_timestamp == NOW + 6000
    e = _explain(_tx(due_ahead_in_group=7), settings=settings)
    assert e.predicted_timestamp == NOW + 7000
    assert e.reasons == ("transaction_timeout", "group_rate_cap")


def test_the_later_of_the_two_caps_applies():
    settings = _settings(
        group_max_in_flight=SourcedValue(1, "setting"),
        group_max_per_second=SourcedValue(1, "setting"),
        scan_interval_ms=2000,
    )
    e = _explain(_tx(due_ahead_in_queue=1, due_ahead_in_group=3), settings=settings)
    assert e.predicted_timestamp == NOW + 5000 + 3000
    e = _explain(_tx(due_ahead_in_queue=2, due_ahead_in_group=3), settings=settings)
    assert e.predicted_timestamp == NOW + 5000 + 4000
    assert e.reasons == ("transaction_timeout", "group_in_flight_cap", "group_rate_cap")


def test_a_resolved_transaction_is_never_checked():
    e = _explain(_tx(resolved=True), group=GroupState(unanswered_since=5))
    assert e.predicted_timestamp is None
    assert e.reasons == ("resolved",)
    assert e.outcome == "none"
    assert e.warnings == ("group_down",)
    assert e.down_since == 5
    assert "check_immunity_ms" not in e.values
    assert _explain(_tx(next_check_timestamp=None)).reasons == ("resolved",)


def test_a_group_without_pending_transactions():
    e = _explain(None)
    assert e.predicted_timestamp is None
    assert e.reasons == ("no_pending",)
    assert e.outcome == "none"
    assert set(e.values) == {
        "transaction_timeout_ms",
        "check_interval_ms",
        "check_max",
        "file_reserved_hours",
        "undelivered_backoff_ms",
        "group_backoff_ms",
        "group_max_in_flight",
        "group_max_per_second",
    }
    assert e.values["check_max"] == SourcedValue(15, "default")
    assert e.values["group_backoff_ms"] == SourcedValue(1000, "setting")


def test_check_max_reached_discards_at_the_next_scan():
    e = _explain(_tx(check_times=15, last_check_timestamp=NOW - 1))
    assert e.outcome == "discard_check_max"
    assert e.warnings == ("check_max_discard",)
    assert _explain(_tx(check_times=14, last_check_timestamp=NOW - 1)).outcome == "check"


def test_file_reserved_time_discards_before_the_next_check():
    born = NOW + 5000 - 72 * HOUR_MS
    assert _explain(_tx(born_timestamp=born)).outcome == "check"
    e = _explain(_tx(born_timestamp=born - 1, check_times=15))
    assert e.outcome == "discard_file_reserved"
    assert e.warnings == ("file_reserved_discard",)


def test_the_group_down_warning_uses_the_earlier_time():
    e = _explain(_tx(), group=GroupState(unreachable_since=7, unanswered_since=3))
    assert e.down_since == 3
    assert e.warnings == ("group_down",)
    assert _explain(_tx(), group=GroupState(unreachable_since=7)).down_since == 7


def test_immunity_beyond_every_check_is_warned():
    settings = _settings(
        check_max=SourcedValue(2, "setting"), check_interval_ms=SourcedValue(10_000, "setting")
    )
    assert _explain(_tx(immunity_seconds=20), settings=settings).warnings == ()
    e = _explain(_tx(immunity_seconds=21), settings=settings)
    assert e.warnings == ("immunity_beyond_checks",)


@pytest.mark.parametrize(("hours", "warned"), [(1, True), (2, False)])
def test_file_reserved_before_the_check_max_is_warned(hours, warned):
    # 600 s + 10 x 300 s = 3600 s: one hour is just enough, less is not.
    settings = _settings(
        transaction_timeout_ms=SourcedValue(600_001, "setting"),
        check_max=SourcedValue(10, "setting"),
        check_interval_ms=SourcedValue(300_000, "setting"),
        file_reserved_hours=SourcedValue(hours, "setting"),
    )
    assert settings_warnings(settings) == (["file_reserved_before_check_max"] if warned else [])
    exact = dataclasses.replace(settings, transaction_timeout_ms=SourcedValue(600_000, "setting"))
    assert (
        settings_warnings(dataclasses.replace(exact, file_reserved_hours=SourcedValue(1, "x")))
        == []
    )
    assert settings_warnings(_settings()) == []


def test_every_code_has_a_text():
    reasons = [v for k, v in vars(ce).items() if k.startswith("REASON_")]
    warnings = [v for k, v in vars(ce).items() if k.startswith("WARNING_")]
    assert set(ce.REASONS) == set(reasons)
    assert set(ce.WARNINGS) == set(warnings)
    assert len(reasons) == 10
    assert len(warnings) == 5

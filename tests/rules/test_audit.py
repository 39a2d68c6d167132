"""How the audit log says a time and who ended a transaction (``broker.rules.audit``)."""

from __future__ import annotations

from broker.rules.audit import ended_by_text, iso_utc

T = 1_795_737_600_123  # 2026-11-27T00:00:00.123Z


def test_iso_utc_has_milliseconds_and_a_z():
    assert iso_utc(T) == "2026-11-27T00:00:00.123Z"
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"


def test_ended_by_names_each_kind_of_end():
    assert ended_by_text(resolved_by="producer", resolved_timestamp=T) == (
        "its producer at 2026-11-27T00:00:00.123Z"
    )
    assert ended_by_text(resolved_by="check", resolved_timestamp=None) == "a back-check answer"
    assert (
        ended_by_text(
            resolved_by="operator", resolved_timestamp=T, actor="console:ann", reason="ticket 7"
        )
        == "operator console:ann (reason: ticket 7) at 2026-11-27T00:00:00.123Z"
    )
    assert ended_by_text(resolved_by="operator", resolved_timestamp=None) == "an operator"
    assert ended_by_text(resolved_by="discard", resolved_timestamp=None, reason="check_max") == (
        "the check scan (discard: check_max)"
    )
    assert ended_by_text(resolved_by=None, resolved_timestamp=None) == "unknown"


def test_an_operator_without_a_reason_is_named_without_one():
    assert ended_by_text(resolved_by="operator", resolved_timestamp=None, actor="operator:k1") == (
        "operator operator:k1"
    )

"""RIP-50 Op message bodies: half queue offsets, each followed by a comma."""

import pytest

from broker.rules.op_body import op_body_format, op_body_parse, op_body_size


def test_format_and_parse_round_trip():
    body = op_body_format([12, 13, 0, 1_000_000_000_000])
    assert body == b"12,13,0,1000000000000,"
    assert op_body_parse(body).offsets == [12, 13, 0, 1_000_000_000_000]
    assert op_body_parse(body).invalid == []
    assert op_body_size([12, 13, 0, 1_000_000_000_000]) == len(body)


def test_a_4x_body_without_a_comma_reads_the_same():
    assert op_body_parse(b"12").offsets == [12]
    assert op_body_parse(memoryview(b"7,")).offsets == [7]


def test_empty_parts_are_skipped_and_bad_parts_reported_not_raised():
    parsed = op_body_parse(b",12,,x1,-3, 14 ," + b"9" * 3 + b"z" * 60)
    assert parsed.offsets == [12, 14]
    assert parsed.invalid[:2] == [b"x1", b"-3"]
    assert len(parsed.invalid[2]) == 40  # capped for the log
    assert op_body_parse(b"").offsets == []


def test_negative_offsets_cannot_be_written():
    with pytest.raises(ValueError, match="half queue offset -1 is negative"):
        op_body_format([1, -1])

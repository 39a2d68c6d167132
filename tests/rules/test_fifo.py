"""FIFO message groups' pure rules (broker.rules.fifo): what a message group may be, its queue,
and which messages of a queue a FIFO consumer group's receive takes."""

import hashlib

import pytest

from broker.rules.fifo import (
    MESSAGE_GROUP_MAX_LENGTH,
    Slot,
    fifo_pick,
    message_group_problem,
    message_group_queue,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("group", ["g", "order-42", "x" * MESSAGE_GROUP_MAX_LENGTH, "é ü", "a b"])
def test_a_message_group_may_be(group):
    assert message_group_problem(group) is None


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        ("", "blank"),
        ("  \t", "blank"),
        ("x" * (MESSAGE_GROUP_MAX_LENGTH + 1), "longer than 64"),
        ("a\x00b", "control"),
        ("a\x1fb", "control"),
        ("a\x7fb", "control"),
        ("a\x9fb", "control"),
    ],
)
def test_a_message_group_may_not_be(group, reason):
    assert reason in message_group_problem(group)


def test_characters_around_the_control_ranges_are_allowed():
    assert message_group_problem("a\x20b") is None
    assert message_group_problem("a\x7eb") is None
    assert message_group_problem("a\xa0b") is None


def test_the_queue_is_the_python_clients_sha256_hash():
    for group in ("g1", "order-42", "é"):
        digest = int.from_bytes(hashlib.sha256(group.encode("utf-8")).digest(), "big")
        for queues in (1, 4, 8):
            assert message_group_queue(group, queues) == digest % queues
    assert {message_group_queue(f"g{i}", 4) for i in range(40)} == {0, 1, 2, 3}


def _w(*slots: tuple[int, str] | tuple[int, str, bool]) -> list[Slot]:
    return [Slot(s[0], s[1], s[2] if len(s) > 2 else True) for s in slots]


def test_each_groups_head_and_every_message_of_no_group():
    window = _w((5, "a"), (6, "a"), (7, ""), (8, "b"), (9, "b"), (10, ""))
    busy: set[str] = set()
    picked, offset = fifo_pick(window, offset=5, taken=[], busy=busy, want=10)
    assert [s.queue_offset for s in picked] == [5, 7, 8, 10]
    assert offset == 6  # a's second message waits
    assert busy == {"a", "b"}


def test_a_busy_group_is_passed_over_and_holds_the_offset():
    window = _w((5, "a"), (6, "b"))
    picked, offset = fifo_pick(window, offset=5, taken=[], busy={"a"}, want=10)
    assert [s.queue_offset for s in picked] == [6]
    assert offset == 5


def test_taken_and_filtered_messages_do_not_hold_the_offset():
    window = _w((5, "a"), (6, "b", False), (7, "a"), (8, ""))
    picked, offset = fifo_pick(window, offset=5, taken={5}, busy=set(), want=10)
    assert [s.queue_offset for s in picked] == [7, 8]
    assert offset == 9  # past the window


def test_want_bounds_the_pick_and_the_offset_stops_at_the_first_left():
    window = _w((5, ""), (6, ""), (7, "a"))
    picked, offset = fifo_pick(window, offset=5, taken=[], busy=set(), want=1)
    assert [s.queue_offset for s in picked] == [5]
    assert offset == 6


def test_want_zero_picks_nothing():
    picked, offset = fifo_pick(_w((5, "a")), offset=5, taken=[], busy=set(), want=0)
    assert picked == []
    assert offset == 5


def test_an_empty_window_keeps_the_offset():
    assert fifo_pick([], offset=7, taken=[], busy=set(), want=3) == ([], 7)


def test_the_offset_never_moves_back():
    picked, offset = fifo_pick(_w((3, "a")), offset=5, taken={3}, busy=set(), want=3)
    assert picked == []
    assert offset == 5


def test_a_filtered_out_message_does_not_mark_its_group_busy():
    window = _w((5, "a", False), (6, "a"))
    busy: set[str] = set()
    picked, _ = fifo_pick(window, offset=5, taken=[], busy=busy, want=3)
    assert [s.queue_offset for s in picked] == [6]


def test_a_taken_message_does_not_mark_its_group_busy():
    # an acked head (taken, no delivery): the group's next message is its head now
    picked, offset = fifo_pick(_w((5, "a"), (6, "a")), offset=5, taken={5}, busy=set(), want=3)
    assert [s.queue_offset for s in picked] == [6]
    assert offset == 7

"""The bound of a topic's queue_nums (broker/rules/topics.py): one definition, read by the
model's constraint, the service and the API serializer."""

from __future__ import annotations

import pytest

from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN, queue_nums_valid


def test_the_bound_is_one_to_1024():
    assert (QUEUE_NUMS_MIN, QUEUE_NUMS_MAX) == (1, 1024)


@pytest.mark.parametrize(
    ("queue_nums", "valid"),
    [(-1, False), (0, False), (1, True), (4, True), (1024, True), (1025, False)],
)
def test_queue_nums_valid_at_the_edges(queue_nums, valid):
    assert queue_nums_valid(queue_nums) is valid

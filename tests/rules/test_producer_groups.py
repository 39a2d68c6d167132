"""The producer group of a gRPC half message (broker.rules.producer_groups)."""

from __future__ import annotations

import pytest

from broker.rules.producer_groups import grpc_producer_group

pytestmark = pytest.mark.unit


def test_a_key_with_one_producer_group_sends_as_that_group_whatever_the_topic() -> None:
    assert grpc_producer_group(topic="Orders", key_producer_groups=["billing"]) == "billing"
    assert grpc_producer_group(topic="Orders", key_producer_groups={"billing"}) == "billing"


@pytest.mark.parametrize("groups", [None, [], ["a", "b"], ["Orders", "b"]])
def test_otherwise_the_group_is_named_after_the_topic(groups: list[str] | None) -> None:
    assert grpc_producer_group(topic="Orders", key_producer_groups=groups) == "Orders"

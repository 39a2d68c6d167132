"""Every 404 for a named thing comes from one rule (broker.errors.not_found): the code
``<kind>_not_found`` and ``details`` naming what was looked for."""

from __future__ import annotations

import pytest

from broker.errors import NotFound, not_found
from tests.api_helpers import assert_error, end, receive, send_half, send_message


@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("topic", "topic"),
        ("producer_group", "producer_group"),
        ("consumer_group", "consumer_group"),
        ("message", "msg_id"),
        ("transaction", "transaction_id"),
    ],
)
def test_not_found_names_the_kind_and_the_name(kind, key):
    error = not_found(kind, "Nope")

    assert isinstance(error, NotFound)
    assert error.status_code == 404
    assert error.code == f"{kind}_not_found"
    assert error.details == {key: "Nope"}
    assert error.message.endswith(" Nope does not exist.")


def test_each_unknown_thing_is_named_in_the_404_details(
    owner, producer, consumer, topic, producer_group, consumer_group
):
    cases = [
        (owner.get("/api/v1/topics/Nope"), "topic_not_found", {"topic": "Nope"}),
        (
            owner.get("/api/v1/producer-groups/Nope"),
            "producer_group_not_found",
            {"producer_group": "Nope"},
        ),
        (
            owner.get("/api/v1/producer-groups/Nope/check-requests"),
            "producer_group_not_found",
            {"producer_group": "Nope"},
        ),
        (
            send_message(owner, producer_group="Nope"),
            "producer_group_not_found",
            {"producer_group": "Nope"},
        ),
        (
            send_half(owner, producer_group="Nope"),
            "producer_group_not_found",
            {"producer_group": "Nope"},
        ),
        (send_half(owner, topic="Nope"), "topic_not_found", {"topic": "Nope"}),
        (
            receive(owner, group="Nope"),
            "consumer_group_not_found",
            {"consumer_group": "Nope"},
        ),
        (receive(consumer, topic="Nope"), "topic_not_found", {"topic": "Nope"}),
        (
            owner.get("/api/v1/messages/0123456789ABCDEF"),
            "message_not_found",
            {"msg_id": "0123456789ABCDEF"},
        ),
        (
            end(producer, "NO-SUCH-TX", "commit"),
            "transaction_not_found",
            {"transaction_id": "NO-SUCH-TX"},
        ),
        (
            owner.get("/api/v1/transactions/NO-SUCH-TX"),
            "transaction_not_found",
            {"transaction_id": "NO-SUCH-TX"},
        ),
    ]
    for response, code, details in cases:
        assert assert_error(response, 404, code)["details"] == details

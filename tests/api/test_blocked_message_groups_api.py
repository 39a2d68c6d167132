"""A FIFO consumer group's blocked message groups in the API
(``/api/v1/consumer-groups/{group}/blocked-message-groups`` and ``.../dead-letter-head``): the
owner's admin key, fifo-ops (a key operating consumer group F only), a consumer key and an
outsider; the refusals (not FIFO, not blocked, head changed) and the audit of the action."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from broker.constants import dlq_topic
from broker.models import AuditEntry, AuditTarget, Delivery, DeliveryEvent, Message
from broker.services.consumption.receive import messages_ack
from broker.services.topology.writes import consumer_group_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, post
from tests.fifo_state import block_heads, fifo_group, receive, send_group

LIST = "/api/v1/consumer-groups/F/blocked-message-groups"
ACT = f"{LIST}/dead-letter-head"


@pytest.fixture
def blocked(db) -> list[Message]:
    """F (FIFO, 5 attempts) with message group order-1 of 3 messages blocked at attempt 2."""
    fifo_group("F", max_delivery_attempts=5)
    sent = send_group("order-1", 3)
    block_heads("F")
    return sent


@pytest.fixture
def fifo_ops(db) -> APIClient:
    return scoped_key("fifo-ops", producer=[], consumer=["F"])


def _act(client: APIClient, group: str = "F", **body) -> object:
    data = {"topic": "Orders", "message_group": "order-1", "reason": "poison order", **body}
    return post(
        client, f"/api/v1/consumer-groups/{group}/blocked-message-groups/dead-letter-head", data
    )


def test_the_list_shows_the_head_its_attempts_and_what_waits(owner, blocked):
    r = owner.get(LIST)
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["consumer_group"], body["fifo"], body["total"]) == ("F", True, 1)
    [row] = body["blocked_message_groups"]
    head = blocked[0]
    assert row["msg_id"] == head.msg_id and row["commit_log_offset"] == head.commit_log_offset
    assert (row["topic"], row["message_group"], row["keys"]) == ("Orders", "order-1", "order-1-0")
    assert (row["delivery_attempt"], row["max_delivery_attempts"]) == (2, 5)
    assert (row["waiting"], row["waiting_capped"]) == (2, False)
    assert (
        row["blocked_since"]
        == DeliveryEvent.objects.get(
            msg_id=head.msg_id, kind="delivered", delivery_attempt=1
        ).timestamp
    )
    assert_error(owner.get(LIST, {"limit": 0}), 400)
    assert owner.get(LIST, {"limit": 1}).status_code == 200


def test_the_head_goes_to_the_dlq_with_reason_and_audit_and_the_group_flows_again(owner, blocked):
    r = _act(owner, msg_id=blocked[0].msg_id)
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["action"], body["state"], body["consumer_group"], body["reason"]) == (
        "dead-letter-head",
        "done",
        "F",
        "poison order",
    )
    entry = AuditEntry.objects.get(pk=body["id"])
    assert (entry.actor, entry.via) == ("operator:owner", "api")
    assert entry.scope == {
        "consumer_group": "F",
        "topic": "Orders",
        "message_group": "order-1",
        "msg_id": blocked[0].msg_id,
        "commit_log_offset": blocked[0].commit_log_offset,
    }
    [target] = AuditTarget.objects.filter(entry=entry)
    assert target.commit_log_offset == blocked[0].commit_log_offset
    assert target.detail["delivery_attempt"] == 2
    # The same move as a consumer's dead-letter: a DLQ copy and the journal's row.
    copy = Message.objects.get(topic=dlq_topic("F"))
    assert copy.msg_id == blocked[0].msg_id
    assert DeliveryEvent.objects.filter(
        consumer_group="F", msg_id=blocked[0].msg_id, kind="dead_lettered", delivery_attempt=2
    ).exists()
    assert not Delivery.objects.filter(consumer_group="F").exists()
    assert owner.get(LIST).json()["total"] == 0
    [nxt] = receive("F")
    assert nxt.message.msg_id == blocked[1].msg_id
    # Done once: again it is not blocked.
    assert_error(_act(owner), 409, "message_group_not_blocked")


def test_refusals_name_what_changed(owner, blocked):
    assert_error(_act(owner, msg_id="0A0A0A0A"), 409, "message_group_head_changed")
    assert_error(_act(owner, message_group="order-2"), 409, "message_group_not_blocked")
    assert_error(_act(owner, reason=" "), 400, "reason_required")
    assert_error(_act(owner, reason=None), 400, "reason_required")
    assert_error(_act(owner, message_group=""), 400)
    assert_error(_act(owner, group="nope"), 404, "consumer_group_not_found")
    consumer_group_create(name="N")
    assert_error(_act(owner, group="N"), 409, "consumer_group_not_fifo")
    assert_error(
        owner.get("/api/v1/consumer-groups/N/blocked-message-groups"),
        409,
        "consumer_group_not_fifo",
    )
    assert_error(owner.get("/api/v1/consumer-groups/nope/blocked-message-groups"), 404)
    # Acked meanwhile: no longer blocked.
    handle = Delivery.objects.get(consumer_group="F").receipt_handle
    messages_ack(consumer_group="F", receipt_handles=[handle])
    assert_error(_act(owner), 409, "message_group_not_blocked")
    assert not AuditEntry.objects.filter(action="dead-letter-head").exists()


def test_a_scoped_operator_acts_on_its_group_only(blocked, fifo_ops, consumer, outsider):
    fifo_group("G", topic="Other")
    send_group("g-1", 1, topic="Other")
    block_heads("G", topic="Other")
    assert fifo_ops.get(LIST).status_code == 200
    assert_error(_act(fifo_ops, group="G", topic="Other", message_group="g-1"), 403)
    for client in (consumer, outsider):
        assert_error(client.get(LIST), 403)
        assert_error(_act(client), 403)
    r = _act(fifo_ops)
    assert r.status_code == 201, r.content
    assert AuditEntry.objects.get(pk=r.json()["id"]).actor == "operator:fifo-ops"

"""The consumer-group operations in the API (``/api/v1/consumer-groups/{group}/...``): the
owner's admin key and billing-ops, a key that operates consumer group ``billing`` only (403 on
``shipping``); a consumer key and an outsider are refused; bad input is a 400 error body."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from broker.models import AuditEntry, Delivery, Message
from broker.rules.clock import now_ms
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, post

BASE = 1_700_000_000_000


def _consume(group: str, topic: str = "Orders") -> list:
    out = []
    while batch := messages_receive(
        consumer_group=group, topic=topic, max_messages=16, invisible_duration_ms=60_000
    ):
        out.extend(batch)
        messages_ack(consumer_group=group, receipt_handles=[r.receipt_handle for r in batch])
    return out


@pytest.fixture
def orders(db) -> list[Message]:
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="billing")
    consumer_group_create(name="shipping", max_delivery_attempts=1)
    sent = [message_send(topic="Orders", body=f"m{i}".encode()) for i in range(6)]
    for i, m in enumerate(sent):
        Message.objects.filter(pk=m.pk).update(store_timestamp=BASE + i * 1000)
    _consume("billing")
    _consume("shipping")
    return sent


@pytest.fixture
def billing_ops(db) -> APIClient:
    return scoped_key("billing-ops", producer=[], consumer=["billing"])


def test_offsets_then_a_reset_previewed_and_applied(owner, orders):
    offsets = owner.get("/api/v1/consumer-groups/billing/offsets")
    assert offsets.status_code == 200
    assert sum(o["offset"] for o in offsets.json()) == 6
    assert {o["lag"] for o in offsets.json()} == {0}

    r = post(owner, "/api/v1/consumer-groups/billing/offset-resets", {"timestamp": BASE + 2000})
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["action"], body["state"], body["consumer_group"]) == (
        "reset-offset",
        "previewed",
        "billing",
    )
    assert body["scope"]["redeliver"] == 4
    url = f"/api/v1/consumer-groups/billing/offset-resets/{body['id']}"
    assert owner.get(url).json()["id"] == body["id"]
    assert_error(post(owner, f"{url}/apply", {}), 400, "reason_required")
    applied = post(owner, f"{url}/apply", {"reason": "replay"})
    assert applied.status_code == 200 and applied.json()["counts"]["redelivered"] == 4
    assert_error(post(owner, f"{url}/apply", {"reason": "again"}), 409, "offset_reset_applied")
    assert sorted(r.message.pk for r in _consume("billing")) == sorted(m.pk for m in orders[2:])
    assert AuditEntry.objects.get(pk=body["id"]).actor == "operator:owner"
    # Another group's path does not find it.
    assert_error(
        owner.get(f"/api/v1/consumer-groups/shipping/offset-resets/{body['id']}"),
        404,
        "offset_reset_not_found",
    )


def test_skip_backlog_preview_and_apply(owner, orders):
    message_send(topic="Orders", body=b"late")
    r = post(owner, "/api/v1/consumer-groups/billing/skip-backlog", {})
    assert r.status_code == 201 and r.json()["scope"]["skip"] == 1
    applied = post(
        owner,
        f"/api/v1/consumer-groups/billing/offset-resets/{r.json()['id']}/apply",
        {"reason": "not needed"},
    )
    assert applied.json()["counts"]["skipped"] == 1
    assert _consume("billing") == []


def test_resend_by_msg_id(owner, orders):
    m = orders[0]
    r = post(
        owner, "/api/v1/consumer-groups/billing/resends", {"msg_id": m.msg_id, "reason": "lost"}
    )
    assert r.status_code == 201, r.content
    assert [x.message.pk for x in _consume("billing")] == [m.pk]
    assert_error(
        post(owner, "/api/v1/consumer-groups/billing/resends", {"reason": "r"}),
        400,
        "invalid_input",
    )
    assert_error(
        post(
            owner,
            "/api/v1/consumer-groups/billing/resends",
            {"msg_id": "00000000000000000000000000000000", "reason": "r"},
        ),
        404,
        "message_not_found",
    )


def test_dead_letters_list_resend_one_and_a_set(owner, orders, django_capture_on_commit_callbacks):
    message_send(topic="Orders", body=b"poison")
    messages_receive(
        consumer_group="shipping", topic="Orders", max_messages=4, invisible_duration_ms=10_000
    )
    Delivery.objects.filter(consumer_group="shipping").update(
        invisible_until_timestamp=now_ms() - 1
    )
    assert _consume("shipping") == []  # dead-lettered
    letters = owner.get("/api/v1/consumer-groups/shipping/dead-letters")
    assert letters.status_code == 200 and len(letters.json()) == 1
    dead = letters.json()[0]
    assert dead["origin_topic"] == "Orders" and dead["resent"] == 0

    one = post(
        owner,
        f"/api/v1/consumer-groups/shipping/dead-letters/{dead['commit_log_offset']}/resend",
        {"reason": "fixed"},
    )
    assert one.status_code == 201, one.content
    assert owner.get("/api/v1/consumer-groups/shipping/dead-letters").json()[0]["resent"] == 1

    preview = post(owner, "/api/v1/consumer-groups/shipping/dead-letter-resends", {})
    assert preview.status_code == 201 and preview.json()["total"] == 1
    url = f"/api/v1/consumer-groups/shipping/dead-letter-resends/{preview.json()['id']}"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        applied = post(owner, f"{url}/apply", {"reason": "fixed"})
    assert applied.status_code == 202 and applied.json()["state"] == "queued"
    assert len(callbacks) == 1
    assert owner.get(url).json()["state"] == "queued"


def test_a_scoped_key_operates_its_group_only(billing_ops, owner, orders):
    ok = post(billing_ops, "/api/v1/consumer-groups/billing/skip-backlog", {})
    assert ok.status_code == 201
    for url, data in [
        ("/api/v1/consumer-groups/shipping/skip-backlog", {}),
        ("/api/v1/consumer-groups/shipping/offset-resets", {"timestamp": BASE}),
        ("/api/v1/consumer-groups/shipping/resends", {"msg_id": orders[0].msg_id, "reason": "r"}),
        ("/api/v1/consumer-groups/shipping/dead-letter-resends", {}),
    ]:
        error = assert_error(post(billing_ops, url, data), 403, "permission_denied")
        assert error["details"] == {"consumer_group": "shipping"}
    theirs = post(owner, "/api/v1/consumer-groups/shipping/skip-backlog", {}).json()
    assert_error(
        post(
            billing_ops,
            f"/api/v1/consumer-groups/shipping/offset-resets/{theirs['id']}/apply",
            {"reason": "r"},
        ),
        403,
        "permission_denied",
    )
    assert AuditEntry.objects.get(pk=theirs["id"]).state == "previewed"
    # Reading is open to any operator key.
    assert billing_ops.get("/api/v1/consumer-groups/shipping/offsets").status_code == 200


def test_consumer_keys_and_outsiders_are_refused(consumer, outsider, anonymous, orders):
    for client, status in ((consumer, 403), (outsider, 403), (anonymous, 401)):
        assert_error(client.get("/api/v1/consumer-groups/billing/offsets"), status)
        assert_error(post(client, "/api/v1/consumer-groups/billing/skip-backlog", {}), status)


@pytest.mark.parametrize(
    "query",
    ["offsets?topic=", "offsets?topic=no%20name", "dead-letters?limit=", "dead-letters?limit=0"]
    + ["dead-letters?limit=101", "dead-letters?before=abc", "dead-letters?before=-1"],
)
def test_a_malformed_query_is_a_400_body(owner, orders, query):
    error = assert_error(
        owner.get(f"/api/v1/consumer-groups/billing/{query}"), 400, "invalid_input"
    )
    assert list(error["details"]["fields"]) == [query.split("?")[1].split("=")[0]]


def test_bad_input_is_a_400_body(owner, orders):
    error = assert_error(
        post(owner, "/api/v1/consumer-groups/billing/offset-resets", {"timestamp": "soon"}),
        400,
        "invalid_input",
    )
    assert "timestamp" in error["details"]["fields"]
    assert_error(
        post(owner, "/api/v1/consumer-groups/billing/offset-resets", {"timestamp": -1}),
        400,
        "invalid_input",
    )
    assert_error(
        post(owner, "/api/v1/consumer-groups/nope/offset-resets", {"timestamp": 0}),
        404,
        "consumer_group_not_found",
    )
    assert_error(
        post(owner, "/api/v1/consumer-groups/billing/dead-letter-resends", {}),
        400,
        "dead_letters_empty",
    )
    assert not AuditEntry.objects.exists()

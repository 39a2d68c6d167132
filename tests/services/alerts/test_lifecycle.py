"""Each kind of alert rule fires and resolves on a broker driven into that state through the
API, and a real local webhook receiver is told exactly once that it fires and exactly once
that it resolves, however many evaluations see it firing in between.

The clock is moved, not waited for: check rounds and evaluations take ``now`` (ms), as the
scan's own tests do; a consumer's invisibility is ended by writing its expiry, as the consumer
API's tests do.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.models import Alert, Delivery, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.services.topology.writes import access_key_create
from tests.api_helpers import end, post, receive, send_half, send_message
from tests.conftest import client_for
from tests.services.alerts.conftest import announced, tick
from tests.support import (
    answer_state,
    check_server_running,
    closed_port_url,
    due_at,
    expected_signature,
    round_for,
)

FIRING, RESOLVED = "firing", "resolved"


def rule(owner: Any, **fields: Any) -> dict[str, Any]:
    """POST /api/v1/alert-rules with ``fields``; the created rule."""
    response = post(owner, "/api/v1/alert-rules", fields)
    assert response.status_code == 201, response.content
    return response.json()


def group_create(owner: Any, name: str, check_url: str | None) -> dict[str, Any]:
    """POST /api/v1/producer-groups; the answer (with the check secret)."""
    response = post(owner, "/api/v1/producer-groups", {"name": name, "check_url": check_url})
    assert response.status_code == 201, response.content
    return response.json()


def test_oldest_pending_fires_once_and_resolves_once(owner, producer, topic, hook):
    group_create(owner, "G", None)
    rule(owner, name="stuck", kind="oldest_pending", group="G", threshold=60)
    transaction_id = send_half(producer).json()["transaction_id"]
    born = Transaction.objects.get(pk=transaction_id).born_timestamp

    tick(born + 30_000)  # 30 s old: under the threshold
    assert announced(hook) == []

    for seconds in (61, 90, 300, 3000):  # older and older: still the one alert
        tick(born + seconds * 1000)
    assert announced(hook) == [(FIRING, "stuck", "G")]
    alert = Alert.objects.get()
    assert alert.state == "firing" and alert.value == 3000.0
    assert transaction_id in alert.summary

    assert end(producer, transaction_id, "commit").status_code == 200
    tick(born + 3001_000)
    tick(born + 3002_000)

    assert announced(hook) == [(FIRING, "stuck", "G"), (RESOLVED, "stuck", "G")]
    alert.refresh_from_db()
    assert alert.state == "resolved" and alert.resolved_timestamp == born + 3001_000


def test_near_check_max_fires_on_transactions_left_unknow_and_resolves(
    owner, producer, topic, hook, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    with check_server_running(answer=answer_state("UNKNOW")) as producer_endpoint:
        group_create(owner, "G", producer_endpoint.url)
        rule(owner, name="near-max", kind="near_check_max", group="G", threshold=1)
        transaction_id = send_half(producer).json()["transaction_id"]
        tx = Transaction.objects.get(pk=transaction_id)
        at = due_at(tx)

        round_for(tx, at)  # check 1 of 3, UNKNOW
        tick(at + 1)
        assert announced(hook) == []

        tx.refresh_from_db()
        at = tx.next_check_timestamp
        round_for(tx, at)  # check 2 of 3: within 1 check of the max
        tx.refresh_from_db()
        assert (tx.state, tx.check_times) == ("PREPARED", 2)
        for step in range(1, 4):
            tick(at + step)
        assert announced(hook) == [(FIRING, "near-max", "G")]
        assert len(producer_endpoint.received()) == 2

    assert end(producer, transaction_id, "commit").status_code == 200
    tick(at + 10)
    tick(at + 11)

    assert announced(hook) == [(FIRING, "near-max", "G"), (RESOLVED, "near-max", "G")]


def test_group_unreachable_fires_on_a_closed_check_endpoint_and_resolves(
    owner, producer, topic, hook
):
    group_create(owner, "G", closed_port_url())
    rule(
        owner, name="g-down", kind="group_unreachable", group="G", threshold=30, severity="critical"
    )
    transaction_id = send_half(producer).json()["transaction_id"]
    tx = Transaction.objects.get(pk=transaction_id)
    at = due_at(tx)

    outcome = round_for(tx, at)["outcomes"][0]  # connection refused: undelivered
    assert not outcome.delivered
    tick(at + 29_000)  # unreachable for 29 s
    assert announced(hook) == []
    for seconds in (30, 45, 120):
        tick(at + seconds * 1000)
    assert announced(hook) == [(FIRING, "g-down", "G")]
    assert "not answered for" in Alert.objects.get().summary

    with check_server_running(answer=answer_state("UNKNOW")) as producer_endpoint:
        patched = owner.patch(
            "/api/v1/producer-groups/G", {"check_url": producer_endpoint.url}, format="json"
        )
        assert patched.status_code == 200
        tick(at + 121_000)  # a new URL, not yet answered: still down
        assert announced(hook) == [(FIRING, "g-down", "G")]
        tx.refresh_from_db()
        round_for(tx, at + 130_000)  # answered: reachable again
        assert len(producer_endpoint.received()) == 1
    tick(at + 131_000)
    tick(at + 132_000)

    assert announced(hook) == [(FIRING, "g-down", "G"), (RESOLVED, "g-down", "G")]
    assert [r.body["alerts"][0]["labels"]["severity"] for r in hook.received()] == ["critical"] * 2


def test_discard_rate_fires_on_discards_and_resolves_when_they_age_out(
    owner, producer, topic, hook, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 1
    with check_server_running(answer=answer_state("UNKNOW")) as producer_endpoint:
        group_create(owner, "G", producer_endpoint.url)
        rule(owner, name="discards", kind="discard_rate", threshold=1, window_s=600)
        ids = [send_half(producer).json()["transaction_id"] for _ in range(2)]
        txs = [Transaction.objects.get(pk=i) for i in ids]
        at = max(due_at(tx) for tx in txs)
        round_for(txs[0], at)
        round_for(txs[1], at)  # the other half queue, if it differs: one check each
        at += 31_000  # one check interval later: check max reached, discarded
        round_for(txs[0], at)
        round_for(txs[1], at)
    assert set(Transaction.objects.values_list("state", flat=True)) == {"DISCARDED"}
    times = TransactionEvent.objects.filter(kind="discarded").values_list("timestamp", flat=True)
    first, last = min(times), max(times)

    for seconds in (1, 60, 590):  # 2 discards in 10 min: 12 per hour, over 1
        tick(first + seconds * 1000)
    assert announced(hook) == [(FIRING, "discards", "G")]
    assert Alert.objects.get().value == 12.0

    tick(last + 601_000)  # the window has moved past them
    tick(last + 602_000)

    assert announced(hook) == [(FIRING, "discards", "G"), (RESOLVED, "discards", "G")]


def test_dlq_growing_fires_on_consumers_that_never_ack_and_resolves(
    owner, producer, consumer, topic, hook
):
    group_create(owner, "G", None)
    created = post(owner, "/api/v1/consumer-groups", {"name": "C", "max_delivery_attempts": 1})
    assert created.status_code == 201
    rule(owner, name="dlq", kind="dlq_growing", group="C", window_s=60)
    for n in range(3):
        assert send_message(producer, body=f"order {n}").status_code == 201
    assert len(receive(consumer, max_messages=10).json()["messages"]) == 3  # never acked
    Delivery.objects.update(invisible_until_timestamp=0)  # their invisibility has ended
    assert receive(consumer).json() == {"messages": []}  # past 1 attempt: to %DLQ%C
    now = now_ms()

    for seconds in (0, 10, 59):
        tick(now + seconds * 1000)
    assert announced(hook) == [(FIRING, "dlq", "C")]
    alert = Alert.objects.get()
    assert (alert.subject_label, alert.value) == ("consumer_group", 3.0)

    tick(now + 61_000)  # nothing more dead-lettered within the window
    tick(now + 62_000)

    assert announced(hook) == [(FIRING, "dlq", "C"), (RESOLVED, "dlq", "C")]


def test_the_webhook_is_alertmanagers_body_signed_like_a_back_check(owner, producer, topic, hook):
    group_create(owner, "G", None)
    rule(owner, name="stuck", kind="oldest_pending", threshold=0, description="Call the G team.")
    transaction_id = send_half(producer).json()["transaction_id"]
    born = Transaction.objects.get(pk=transaction_id).born_timestamp
    tick(born + 1000)
    end(producer, transaction_id, "rollback")
    tick(born + 2000)

    firing, resolved = hook.received()
    secret = hook.receiver.secret
    for request in (firing, resolved):
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["X-Halfmoon-Signature"] == expected_signature(secret, request.raw)
    body = firing.body
    assert set(body) == {
        "version",
        "groupKey",
        "truncatedAlerts",
        "status",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    }
    assert (body["version"], body["status"], body["receiver"]) == ("4", "firing", "hook")
    (alert,) = body["alerts"]
    assert alert["labels"] == {
        "alertname": "stuck",
        "severity": "warning",
        "kind": "oldest_pending",
        "producer_group": "G",
        "service": "halfmoon",
    }
    assert alert["annotations"]["description"] == "Call the G team."
    assert (
        alert["annotations"]["runbook_url"] == "docs/alerts.md#oldest-pending-transaction-too-old"
    )
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["generatorURL"].endswith(f"/console/alerts/{Alert.objects.get().pk}/")
    ended = resolved.body["alerts"][0]
    assert resolved.body["status"] == ended["status"] == "resolved"
    assert ended["fingerprint"] == alert["fingerprint"]
    assert ended["startsAt"] == alert["startsAt"] and ended["endsAt"] != "0001-01-01T00:00:00Z"


@pytest.mark.parametrize("kind", ["oldest_pending", "group_unreachable"])
def test_a_rule_for_every_group_fires_once_per_group(owner, topic, hook, kind):
    group_create(owner, "G", closed_port_url())
    group_create(owner, "H", closed_port_url())
    rule(owner, name="all", kind=kind, threshold=0)
    keys = {g: client_for(access_key_create(name=f"p-{g}", producer_groups=[g])[1]) for g in "GH"}
    txs = [
        Transaction.objects.get(pk=send_half(keys[g], producer_group=g).json()["transaction_id"])
        for g in "GH"
    ]
    at = max(due_at(tx) for tx in txs)
    for tx in txs:
        round_for(tx, at)
    tick(at + 1000)
    tick(at + 2000)

    assert sorted(announced(hook)) == [(FIRING, "all", "G"), (FIRING, "all", "H")]


def test_nothing_is_sent_without_a_receiver_but_the_alert_fires(owner, producer, topic):
    group_create(owner, "G", None)
    rule(owner, name="stuck", kind="oldest_pending", threshold=0)
    transaction_id = send_half(producer).json()["transaction_id"]
    tick(Transaction.objects.get(pk=transaction_id).born_timestamp + 1000)

    alert = Alert.objects.get()
    assert alert.state == "firing" and not alert.notifications.exists()

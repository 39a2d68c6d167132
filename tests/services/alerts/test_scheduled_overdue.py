"""The ``scheduled_overdue`` alert kind: a delay message sent through the API and left
unmoved past its due time plus the threshold fires once per topic (label ``topic``) to a real
local webhook receiver, and resolves once the timer delivers it."""

from __future__ import annotations

from typing import Any

from broker.models import Alert
from broker.rules.clock import now_ms
from broker.services.timers.deliver import scheduled_messages_deliver
from tests.api_helpers import post, send_message
from tests.support import CheckServer

from .conftest import tick

FIRING, RESOLVED = "firing", "resolved"


def announced_topics(server: CheckServer) -> list[tuple[str, str, str]]:
    """(status, alertname, topic label) of each Alertmanager body the server received."""
    out = []
    for request in server.received():
        body: Any = request.body
        for alert in body["alerts"]:
            labels = alert["labels"]
            out.append((alert["status"], labels["alertname"], labels.get("topic", "")))
    return out


def test_scheduled_overdue_fires_past_the_threshold_and_resolves_once_delivered(
    owner, producer, topic, hook
):
    created = post(
        owner,
        "/api/v1/alert-rules",
        {"name": "late", "kind": "scheduled_overdue", "group": "TranTest", "threshold": 60},
    )
    assert created.status_code == 201, created.content
    due = now_ms() + 5_000
    sent = send_message(producer, body="cancel order 7", deliver_at=due)
    assert sent.status_code == 201, sent.content

    tick(due - 1_000)  # not due yet
    tick(due + 60_000)  # due, but not past the threshold
    assert announced_topics(hook) == []
    tick(due + 61_000)
    tick(due + 90_000)  # still firing: nothing more
    assert announced_topics(hook) == [(FIRING, "late", "TranTest")]
    alert = Alert.objects.get()
    assert (alert.subject_label, alert.subject, alert.value) == ("topic", "TranTest", 90.0)
    assert alert.summary.startswith("1 scheduled messages of topic TranTest not delivered")

    assert scheduled_messages_deliver(now=due + 91_000) == 1  # the timer catches up
    tick(due + 92_000)
    assert announced_topics(hook) == [
        (FIRING, "late", "TranTest"),
        (RESOLVED, "late", "TranTest"),
    ]


def test_a_scheduled_overdue_rule_names_an_existing_topic(owner, topic):
    refused = post(
        owner,
        "/api/v1/alert-rules",
        {"name": "late", "kind": "scheduled_overdue", "group": "NoSuchTopic"},
    )
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "topic_not_found"
    kept = post(owner, "/api/v1/alert-rules", {"name": "late", "kind": "scheduled_overdue"})
    assert kept.status_code == 201 and kept.json()["threshold"] == 60

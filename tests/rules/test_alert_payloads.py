"""Notification bodies (broker.rules.alert_payloads): Alertmanager's webhook body (version 4),
a Slack message and an e-mail, from one frozen snapshot. Plain values only."""

from __future__ import annotations

from broker.rules.alert_payloads import (
    GO_ZERO_TIME,
    AlertSnapshot,
    alert_labels,
    alertmanager_body,
    email_text,
    fingerprint,
    slack_body,
)

STARTED = 1_732_362_782_120  # 2024-11-23T11:53:02.120Z


def snapshot(status: str = "firing", ends_at: int | None = None) -> AlertSnapshot:
    labels = alert_labels(
        rule="g-down",
        kind="group_unreachable",
        severity="critical",
        subject_label="producer_group",
        subject="G",
    )
    return AlertSnapshot(
        status=status,
        event=status,
        labels=labels,
        annotations={
            "summary": "checks to G not answered for 5 min",
            "description": "Page the G team.",
            "runbook_url": "docs/alerts.md#producer-group-unreachable",
        },
        starts_at=STARTED,
        ends_at=ends_at,
        generator_url="http://console.example/console/alerts/7/",
        fingerprint=fingerprint(labels),
    )


def test_labels_name_the_rule_and_group_never_an_id():
    assert snapshot().labels == {
        "alertname": "g-down",
        "severity": "critical",
        "kind": "group_unreachable",
        "producer_group": "G",
        "service": "halfmoon",
    }


def test_the_fingerprint_follows_the_labels_only():
    labels = snapshot().labels
    assert fingerprint(labels) == fingerprint(dict(reversed(list(labels.items()))))
    assert fingerprint(labels) != fingerprint({**labels, "producer_group": "H"})
    assert len(fingerprint(labels)) == 16


def test_the_alertmanager_body_is_the_webhook_receivers_version_4():
    body = alertmanager_body(snapshot(), receiver="hook", external_url="http://console.example")

    assert body["version"] == "4"
    assert body["status"] == "firing"
    assert body["receiver"] == "hook"
    assert body["externalURL"] == "http://console.example"
    assert body["groupLabels"] == body["commonLabels"] == snapshot().labels
    assert body["commonAnnotations"]["runbook_url"] == "docs/alerts.md#producer-group-unreachable"
    assert body["groupKey"].startswith('{}:{alertname="g-down", kind="group_unreachable"')
    (alert,) = body["alerts"]
    assert alert["startsAt"] == "2024-11-23T11:53:02.120Z"
    assert alert["endsAt"] == GO_ZERO_TIME
    assert alert["generatorURL"] == "http://console.example/console/alerts/7/"


def test_a_resolved_body_has_its_end():
    resolved = snapshot("resolved", ends_at=STARTED + 300_000)
    alert = alertmanager_body(resolved, receiver="hook", external_url="x")["alerts"][0]

    assert alert["status"] == "resolved"
    assert alert["endsAt"] == "2024-11-23T11:58:02.120Z"
    assert alert["fingerprint"] == snapshot().fingerprint


def test_the_slack_message_has_a_headline_and_the_labels():
    body = slack_body(snapshot())

    assert body["text"] == (
        "[FIRING] g-down (critical) on producer group G: checks to G not answered for 5 min"
    )
    (attachment,) = body["attachments"]
    assert attachment["text"] == "Page the G team."
    assert attachment["ts"] == STARTED // 1000
    titles = [f["title"] for f in attachment["fields"]]
    assert titles[:5] == sorted(snapshot().labels)
    assert "runbook" in titles


def test_the_email_has_a_subject_and_every_fact():
    subject, body = email_text(snapshot("resolved", ends_at=STARTED + 1000))

    assert subject.startswith("[RESOLVED] g-down (critical) on producer group G: checks to G")
    assert "Resolved: 2024-11-23T11:53:03.120Z" in body
    assert "producer_group: G" in body
    assert "Console: http://console.example/console/alerts/7/" in body


def test_a_snapshot_survives_its_round_trip():
    assert AlertSnapshot.from_dict(snapshot().as_dict()) == snapshot()

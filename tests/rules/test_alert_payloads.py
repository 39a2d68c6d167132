"""Notification bodies (broker.rules.alert_payloads): Alertmanager's webhook body (version 4),
a Slack message and an e-mail, from one frozen snapshot. Plain values only."""

from __future__ import annotations

from dataclasses import replace

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


LABELS = {
    "alertname": "g-down",
    "severity": "critical",
    "kind": "group_unreachable",
    "producer_group": "G",
    "service": "halfmoon",
}
ANNOTATIONS = {
    "summary": "checks to G not answered for 5 min",
    "description": "Page the G team.",
    "runbook_url": "docs/alerts.md#producer-group-unreachable",
}


def test_the_fingerprint_of_the_same_labels_never_changes_between_releases():
    # Receivers group and deduplicate by it: a new spelling would re-page every firing alert.
    assert fingerprint(LABELS) == "3844c18dd0cf74cf"


def test_the_alertmanager_body_carries_the_alerts_labels_annotations_and_fingerprint():
    body = alertmanager_body(snapshot(), receiver="hook", external_url="http://console.example")

    assert body == {
        "version": "4",
        "groupKey": (
            '{}:{alertname="g-down", kind="group_unreachable", producer_group="G", '
            'service="halfmoon", severity="critical"}'
        ),
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "hook",
        "groupLabels": LABELS,
        "commonLabels": LABELS,
        "commonAnnotations": ANNOTATIONS,
        "externalURL": "http://console.example",
        "alerts": [
            {
                "status": "firing",
                "labels": LABELS,
                "annotations": ANNOTATIONS,
                "startsAt": "2024-11-23T11:53:02.120Z",
                "endsAt": GO_ZERO_TIME,
                "generatorURL": "http://console.example/console/alerts/7/",
                "fingerprint": "3844c18dd0cf74cf",
            }
        ],
    }


def test_an_alert_keeps_the_fingerprint_frozen_in_its_snapshot_else_computes_it():
    frozen = replace(snapshot(), fingerprint="00000000000000aa")
    (alert,) = alertmanager_body(frozen, receiver="hook", external_url="x")["alerts"]
    assert alert["fingerprint"] == "00000000000000aa"
    unfrozen = replace(snapshot(), fingerprint="")
    (alert,) = alertmanager_body(unfrozen, receiver="hook", external_url="x")["alerts"]
    assert alert["fingerprint"] == fingerprint(LABELS)


def test_the_slack_message_of_a_resolved_alert_has_every_field():
    body = slack_body(snapshot("resolved", ends_at=STARTED + 300_000))

    headline = "[RESOLVED] g-down (critical) on producer group G"
    assert body == {
        "text": f"{headline}: checks to G not answered for 5 min",
        "attachments": [
            {
                "color": "#2eb67d",
                "title": headline,
                "title_link": "http://console.example/console/alerts/7/",
                "text": "Page the G team.",
                "fields": [
                    {"title": "alertname", "value": "g-down", "short": True},
                    {"title": "kind", "value": "group_unreachable", "short": True},
                    {"title": "producer_group", "value": "G", "short": True},
                    {"title": "service", "value": "halfmoon", "short": True},
                    {"title": "severity", "value": "critical", "short": True},
                    {"title": "started", "value": "2024-11-23T11:53:02.120Z", "short": True},
                    {"title": "resolved", "value": "2024-11-23T11:58:02.120Z", "short": True},
                    {
                        "title": "runbook",
                        "value": "docs/alerts.md#producer-group-unreachable",
                        "short": False,
                    },
                ],
                "ts": STARTED // 1000,
            }
        ],
    }


def test_slack_colours_follow_the_status():
    assert slack_body(snapshot("firing"))["attachments"][0]["color"] == "#d63232"
    assert slack_body(snapshot("resolved"))["attachments"][0]["color"] == "#2eb67d"
    assert slack_body(snapshot("pending"))["attachments"][0]["color"] == "#888888"


def test_without_annotations_the_messages_say_only_the_headline_and_facts():
    bare = replace(snapshot(), annotations={})
    headline = "[FIRING] g-down (critical) on producer group G"

    slack = slack_body(bare)
    assert slack["text"] == headline
    assert slack["attachments"][0]["text"] == ""
    assert [f["title"] for f in slack["attachments"][0]["fields"]][-1] == "started"
    subject, text = email_text(bare)
    assert subject == headline
    assert text == (
        f"{headline}\n\n\n\n\nStarted: 2024-11-23T11:53:02.120Z\nalertname: g-down\n"
        "kind: group_unreachable\nproducer_group: G\nservice: halfmoon\nseverity: critical\n\n"
        "Console: http://console.example/console/alerts/7/\n"
    )


def test_a_headline_without_a_group_or_labels_still_reads():
    no_group = replace(snapshot(), labels={"alertname": "r", "severity": "warning"})
    assert slack_body(no_group)["attachments"][0]["title"] == "[FIRING] r (warning)"
    assert slack_body(replace(snapshot(), labels={}))["attachments"][0]["title"] == "[FIRING]  ()"


def test_the_email_of_a_resolved_alert_is_every_line_in_order():
    subject, text = email_text(snapshot("resolved", ends_at=STARTED + 300_000))

    assert subject == "[RESOLVED] g-down (critical) on producer group G: " + ANNOTATIONS["summary"]
    assert text == (
        "[RESOLVED] g-down (critical) on producer group G\n"
        "\n"
        "checks to G not answered for 5 min\n"
        "Page the G team.\n"
        "\n"
        "Started: 2024-11-23T11:53:02.120Z\n"
        "Resolved: 2024-11-23T11:58:02.120Z\n"
        "alertname: g-down\n"
        "kind: group_unreachable\n"
        "producer_group: G\n"
        "service: halfmoon\n"
        "severity: critical\n"
        "\n"
        "Console: http://console.example/console/alerts/7/\n"
        "Runbook: docs/alerts.md#producer-group-unreachable\n"
    )


def test_an_email_subject_is_cut_at_250_characters():
    long = replace(snapshot(), annotations={**ANNOTATIONS, "summary": "s" * 300})
    subject, _ = email_text(long)
    assert len(subject) == 250 and subject.endswith("s" * 100)

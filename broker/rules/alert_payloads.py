"""What a notification of one of Halfmoon's own alerts says, in each receiver's format. Pure:
an ``AlertSnapshot`` in, a JSON-ready body or an e-mail's text out; no database, no settings.

- ``alertmanager_body``: the JSON body Prometheus Alertmanager POSTs to a ``webhook_config``
  receiver (version 4: ``receiver``, ``status``, ``alerts`` with ``labels``, ``annotations``,
  ``startsAt``, ``endsAt``, ``generatorURL``, ``fingerprint``, and the group's common labels),
  so a receiver written for Alertmanager's webhooks takes Halfmoon's as they are.
- ``slack_body``: a Slack incoming-webhook message (``text`` and one ``attachments`` entry,
  which Mattermost and Rocket.Chat's Slack-compatible hooks read too).
- ``email_text``: a subject line and a plain-text body.

One notification carries one alert (a rule on one group), so ``groupLabels`` and
``commonLabels`` are that alert's own labels.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from broker.rules.audit import iso_utc

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
"""``endsAt`` of a firing alert in Alertmanager's webhooks (Go's zero ``time.Time``)."""

ALERTMANAGER_WEBHOOK_VERSION = "4"

_SLACK_COLORS = {"firing": "#d63232", "resolved": "#2eb67d"}


@dataclass(frozen=True)
class AlertSnapshot:
    """One alert as a notification describes it, frozen when the notification is queued.

    ``status``: ``firing`` or ``resolved``; ``event``: ``firing``, ``reminder`` or
    ``resolved`` (``broker.rules.alerts.NotificationEvent``); ``labels`` (``alertname`` = the
    rule's name, ``severity``, ``kind``, the group's label, ``service``) and ``annotations``
    (``summary``, ``description``, ``runbook_url``); ``starts_at`` and ``ends_at`` in ms since
    the epoch (``ends_at`` None while firing); ``generator_url``: the console page of the
    alert."""

    status: str
    event: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: int
    ends_at: int | None
    generator_url: str
    fingerprint: str = field(default="")

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready values (stored with the notification)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertSnapshot:
        """The snapshot ``as_dict`` stored.

        Raises:
            TypeError: keys that are not the snapshot's.
        """
        return cls(**data)


def alert_labels(
    *, rule: str, kind: str, severity: str, subject_label: str, subject: str
) -> dict[str, str]:
    """An alert's labels: ``alertname`` (the rule's name), ``severity``, ``kind``, the group
    (``subject_label`` = ``producer_group`` or ``consumer_group``, its value ``subject``) and
    ``service`` = ``halfmoon``. Names only, never transaction or message ids."""
    return {
        "alertname": rule,
        "severity": severity,
        "kind": kind,
        subject_label: subject,
        "service": "halfmoon",
    }


def fingerprint(labels: dict[str, str]) -> str:
    """16 hex digits identifying an alert by its labels (stable across evaluations)."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _alertmanager_alert(snapshot: AlertSnapshot) -> dict[str, Any]:
    return {
        "status": snapshot.status,
        "labels": dict(snapshot.labels),
        "annotations": dict(snapshot.annotations),
        "startsAt": iso_utc(snapshot.starts_at),
        "endsAt": iso_utc(snapshot.ends_at) if snapshot.ends_at is not None else GO_ZERO_TIME,
        "generatorURL": snapshot.generator_url,
        "fingerprint": snapshot.fingerprint or fingerprint(snapshot.labels),
    }


def alertmanager_body(
    snapshot: AlertSnapshot, *, receiver: str, external_url: str
) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for ``snapshot``, as sent to ``receiver``
    (its name); ``external_url``: the console's base URL (Alertmanager's ``externalURL``)."""
    labels = dict(snapshot.labels)
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return {
        "version": ALERTMANAGER_WEBHOOK_VERSION,
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": snapshot.status,
        "receiver": receiver,
        "groupLabels": labels,
        "commonLabels": labels,
        "commonAnnotations": dict(snapshot.annotations),
        "externalURL": external_url,
        "alerts": [_alertmanager_alert(snapshot)],
    }


def _headline(snapshot: AlertSnapshot) -> str:
    """``[FIRING] rule (warning) on producer group G``, ``[REMINDER] ...``, ``[RESOLVED] ...``."""
    labels = snapshot.labels
    group = next(
        (f"{k.replace('_', ' ')} {v}" for k, v in labels.items() if k.endswith("_group")), ""
    )
    on = f" on {group}" if group else ""
    return f"[{snapshot.event.upper()}] {labels.get('alertname', '')} ({labels.get('severity', '')}){on}"


def slack_body(snapshot: AlertSnapshot) -> dict[str, Any]:
    """A Slack incoming-webhook message for ``snapshot``: ``text`` (the headline and the
    summary) and one attachment (colour by status, the description, labels as fields, the
    console link, the runbook and the start time)."""
    annotations = snapshot.annotations
    headline = _headline(snapshot)
    summary = annotations.get("summary", "")
    fields = [{"title": k, "value": v, "short": True} for k, v in sorted(snapshot.labels.items())]
    fields.append({"title": "started", "value": iso_utc(snapshot.starts_at), "short": True})
    if snapshot.ends_at is not None:
        fields.append({"title": "resolved", "value": iso_utc(snapshot.ends_at), "short": True})
    if annotations.get("runbook_url"):
        fields.append({"title": "runbook", "value": annotations["runbook_url"], "short": False})
    return {
        "text": f"{headline}: {summary}" if summary else headline,
        "attachments": [
            {
                "color": _SLACK_COLORS.get(snapshot.status, "#888888"),
                "title": headline,
                "title_link": snapshot.generator_url,
                "text": annotations.get("description", ""),
                "fields": fields,
                "ts": snapshot.starts_at // 1000,
            }
        ],
    }


def email_text(snapshot: AlertSnapshot) -> tuple[str, str]:
    """(subject, plain-text body) of the e-mail for ``snapshot``."""
    annotations = snapshot.annotations
    lines = [
        _headline(snapshot),
        "",
        annotations.get("summary", ""),
        annotations.get("description", ""),
        "",
        f"Started: {iso_utc(snapshot.starts_at)}",
    ]
    if snapshot.ends_at is not None:
        lines.append(f"Resolved: {iso_utc(snapshot.ends_at)}")
    lines += [f"{k}: {v}" for k, v in sorted(snapshot.labels.items())]
    lines += ["", f"Console: {snapshot.generator_url}"]
    if annotations.get("runbook_url"):
        lines.append(f"Runbook: {annotations['runbook_url']}")
    subject = _headline(snapshot)
    if annotations.get("summary"):
        subject = f"{subject}: {annotations['summary']}"
    return subject[:250], "\n".join(lines) + "\n"

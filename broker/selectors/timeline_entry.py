"""One fact of a transaction's timeline (``TimelineEntry``) and the operator-facing names of
the channels a check travels by; the entries are made by ``broker.selectors.timeline`` and
``broker.selectors.timeline_consumers``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TimelineEntry:
    """One fact of a transaction's history.

    ``timestamp``: when (ms since the epoch), None when the broker does not journal the time
    (a consumer's ack deletes its delivery; these come last); ``kind``: what (see
    ``transaction_timeline``); ``title``: one line for people; ``actor``: who caused it
    (producer group, ``scan``, ``http`` / ``poll`` / ``telemetry`` check channel,
    ``operator:<name>``, a consumer group) or ""; ``detail``: the journal's own fields;
    ``channel``: for a check (``check_sent``, ``check_undelivered``), how it travelled, by its
    operator-facing name (``check_channel_name``), else "".
    """

    timestamp: int | None
    kind: str
    title: str
    actor: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    channel: str = ""


CHECK_CHANNEL_NAMES = {"http": "webhook", "poll": "long poll", "telemetry": "telemetry (gRPC)"}
"""A check journal row's ``actor`` (its channel) by the name operators know it: a POST to the
group's check URL, a hand-out to a producer long-polling its check requests, a
``RecoverOrphanedTransactionCommand`` written on a RocketMQ client's telemetry stream."""


def check_channel_name(actor: str) -> str:
    """The operator-facing name of the channel a check journal row's ``actor`` names
    (``CHECK_CHANNEL_NAMES``; an unknown one as it is)."""
    return CHECK_CHANNEL_NAMES.get(actor, actor)

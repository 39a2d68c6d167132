"""A real local webhook receiver for the alert tests, and the beat task's two steps.

- ``hook``: a receiver ``hook`` (Alertmanager's webhook body) whose URL is a real HTTP server
  on 127.0.0.1 (``tests.support.CheckServer``, answering 200), recording every request.
- ``announced(server)``: what the receiver was told, as (status, rule, group) in order.
- ``tick(now)``: one evaluation at ``now`` (ms), then the delivery of what is due.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker.models import AlertReceiver
from broker.services.alerts import alerts_evaluate, notifications_deliver
from broker.services.alerts.receivers import receiver_create
from tests.support import CheckServer, check_server_running


@pytest.fixture
def hook(db) -> Iterator[CheckServer]:
    """A webhook receiver (kind ``alertmanager``) at a real local HTTP server answering 200;
    ``hook.receiver`` is its ``AlertReceiver`` (with the secret that signs its bodies)."""
    with check_server_running(answer=lambda body: (200, {})) as server:
        server.receiver = receiver_create(  # type: ignore[attr-defined]
            name="hook", kind=AlertReceiver.Kind.ALERTMANAGER, url=server.url
        )
        yield server


def announced(server: CheckServer) -> list[tuple[str, str, str]]:
    """(status, alertname, group) of each Alertmanager body the server received, in order."""
    out = []
    for request in server.received():
        body: Any = request.body
        for alert in body["alerts"]:
            labels = alert["labels"]
            group = labels.get("producer_group") or labels.get("consumer_group", "")
            out.append((alert["status"], labels["alertname"], group))
    return out


def tick(now: int) -> None:
    """The beat task at ``now`` (ms): evaluate every rule, then deliver what is due."""
    alerts_evaluate(now=now)
    notifications_deliver()

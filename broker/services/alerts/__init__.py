"""Halfmoon's own alerts: rules (``rules``), receivers (``receivers``), the
evaluation (``evaluation``), notifications and their delivery (``notifications``,
``webhooks``) and silences (``silences``). The pure rules behind them:
``broker.rules.alerts`` (kinds, thresholds, the firing/resolved state machine) and
``broker.rules.alert_payloads`` (Alertmanager, Slack and e-mail bodies)."""

from __future__ import annotations

from broker.services.alerts.evaluation import alerts_evaluate
from broker.services.alerts.notifications import notifications_deliver


def alerts_tick(*, now: int | None = None) -> dict[str, object]:
    """Beat's alert task, every HALFMOON_ALERT_EVALUATION_INTERVAL_MS: evaluate every rule (one
    database transaction), then deliver the notifications due, this evaluation's and earlier
    ones' retries (outside any transaction). ``now`` (ms): the evaluation's clock (default
    the clock; delivery always uses the clock). Returns both reports as plain values."""
    evaluated = alerts_evaluate(now=now)
    delivered = notifications_deliver()
    return {"evaluation": evaluated.as_dict(), "delivery": delivered.as_dict()}


__all__ = ["alerts_evaluate", "alerts_tick", "notifications_deliver"]

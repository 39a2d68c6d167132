"""Alert tasks: thin wrappers over ``broker.services.alerts``."""

from __future__ import annotations

from celery import shared_task

from broker.services.alerts import alerts_tick


@shared_task(name="tasks.alerts.alerts_tick", ignore_result=True)
def alerts_tick_task() -> dict[str, object]:
    """Beat entry, every HALFMOON_ALERT_EVALUATION_INTERVAL_MS: evaluate the alert rules, then
    deliver the notifications due (``alerts_tick``)."""
    return alerts_tick()

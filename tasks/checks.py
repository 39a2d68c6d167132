"""Back-check tasks: thin wrappers over ``broker.services.checks`` (the scan is a service)."""

from __future__ import annotations

from celery import shared_task

from broker.services.checks import half_queue_scan, half_queue_scans_dispatch


@shared_task(name="tasks.checks.check_dispatch", ignore_result=True)
def check_dispatch() -> int:
    """Beat entry, every HALFMOON_CHECK_SCAN_INTERVAL_MS: one ``check_half_queue`` per queue."""
    return half_queue_scans_dispatch()


@shared_task(name="tasks.checks.check_half_queue", ignore_result=True)
def check_half_queue(queue_id: int) -> dict[str, int] | None:
    """Scan one half queue (``half_queue_scan``); None if another worker holds its lease."""
    return half_queue_scan(half_queue_id=queue_id)

"""Checks handed to producers that poll (api-v1 ``GET /producer-groups/{group}/check-requests``):
a producer group with no ``check_url`` gets its back-checks queued by the claim as
``CheckRequest`` rows, and a poller takes them here."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from broker.models import CheckRequest, Message, ProducerGroup, Transaction
from broker.rules.clock import now_ms
from broker.rules.states import TransactionState
from broker.services.checks.outcomes import check_delivered_record
from broker.services.checks.payload import check_payload


def check_requests_poll(*, producer_group: str, max_requests: int = 32) -> list[dict[str, Any]]:
    """Hand the queued check requests of a polling group to this poller, oldest first, at most
    ``max_requests``; requests locked by another poller are skipped (``SKIP LOCKED``).

    Each request handed out counts as a delivered check (api-v1). Requests whose transaction
    was resolved meanwhile are dropped. Records the group's ``last_poll_timestamp``. Returns
    the check bodies (``check_payload``, the same shape as a POSTed check).
    """
    now = now_ms()
    out: list[dict[str, Any]] = []
    with transaction.atomic():
        ProducerGroup.objects.filter(name=producer_group).update(last_poll_timestamp=now)
        requests = list(
            CheckRequest.objects.select_for_update(skip_locked=True)
            .filter(producer_group=producer_group, delivered_timestamp__isnull=True)
            .order_by("created_timestamp")[:max_requests]
        )
        if not requests:
            return out
        txs = Transaction.objects.in_bulk([r.transaction_id for r in requests])
        halves = Message.objects.in_bulk([t.half_commit_log_offset for t in txs.values()])
        for request in requests:
            tx = txs[request.transaction_id]
            if tx.state != TransactionState.PREPARED:
                request.delete()
                continue
            request.delivered_timestamp = now
            request.save(update_fields=["delivered_timestamp"])
            check_times = check_delivered_record(
                transaction_id=tx.pk,
                producer_group=producer_group,
                channel="poll",
                now=now,
                detail={},
            )
            out.append(check_payload(tx, halves[tx.half_commit_log_offset], check_times))
    return out

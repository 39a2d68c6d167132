"""Transaction events pushed to the console's websocket, and the one helper that sends them.

Services call ``transaction_event_publish`` through ``transaction.on_commit`` so nothing is
announced for a write that rolled back. A failure to reach the channel layer is logged and
never fails the write that caused it.
"""

from __future__ import annotations

import logging
from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger("halfmoon.console")

TRANSACTIONS_GROUP = "console.transactions"


class TransactionEvent(TypedDict):
    """``{"type": "transaction.event", ...}``: a transaction changed state or was checked."""

    type: Literal["transaction.event"]
    kind: str  # resolved | discarded | check_sent | check_undelivered
    transaction_id: str
    producer_group: str
    topic: str
    state: str
    check_times: int
    timestamp: int


def transaction_event_publish(event: TransactionEvent) -> None:
    """Send ``event`` to every connected console websocket (group ``console.transactions``)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(TRANSACTIONS_GROUP, event)
    except Exception:  # noqa: BLE001 - the console is best effort; the write is already durable
        logger.warning("could not publish %s of %s", event["kind"], event["transaction_id"], exc_info=True)

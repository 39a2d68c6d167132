"""Websocket consumers. They check rights, join groups and relay events; they write nothing."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from broker.plumbing.events import (
    BULK_ACTIONS_GROUP,
    TRANSACTIONS_GROUP,
    BulkActionProgress,
    TransactionChange,
)
from console.roles import VIEW

CLOSE_ANONYMOUS = 4401  # not signed in
CLOSE_FORBIDDEN = 4403  # signed in without console.view_console
GROUPS = (TRANSACTIONS_GROUP, BULK_ACTIONS_GROUP)


def _relayed(stream: str, event: TransactionChange | BulkActionProgress) -> dict[str, Any]:
    """The browser's JSON: ``{"stream": stream, ...event}`` without the channel-layer ``type``."""
    return {"stream": stream, **{k: v for k, v in event.items() if k != "type"}}


class TransactionFeedConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/transactions/``: the broker's live events for console users.

    Accepts a signed-in user (session, through ``AuthMiddlewareStack``) with
    ``console.view_console`` (viewer, operator, admin); closes with 4401 for an anonymous
    visitor and 4403 for a user without the permission. Relays ``TRANSACTIONS_GROUP`` events as
    ``{"stream": "transaction", kind, transaction_id, producer_group, topic, state,
    check_times, timestamp}`` and ``BULK_ACTIONS_GROUP`` events as ``{"stream": "bulk",
    bulk_id, action, state, total, processed, counts, timestamp}``.
    """

    groups_joined: tuple[str, ...] = ()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_ANONYMOUS)
            return
        if not await database_sync_to_async(user.has_perm)(VIEW):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        for group in GROUPS:
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = GROUPS
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def transaction_event(self, event: TransactionChange) -> None:
        await self.send_json(_relayed("transaction", event))

    async def transaction_events(self, message: dict[str, Any]) -> None:
        """Several transaction events published together (``broker.plumbing.events``): each relayed
        as its own websocket message, in order."""
        for event in message["events"]:
            await self.transaction_event(event)

    async def bulk_progress(self, event: BulkActionProgress) -> None:
        await self.send_json(_relayed("bulk", event))

    async def bulk_progresses(self, message: dict[str, Any]) -> None:
        """Several bulk progress events published together, each relayed in order."""
        for event in message["events"]:
            await self.bulk_progress(event)

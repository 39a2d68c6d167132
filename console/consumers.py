"""Websocket consumers. They join groups, check rights and relay events; they write nothing."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from broker.events import TRANSACTIONS_GROUP, TransactionChange


class TransactionFeedConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/transactions/``: live transaction events for staff users signed in to the site."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_staff:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(TRANSACTIONS_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(TRANSACTIONS_GROUP, self.channel_name)

    async def transaction_event(self, event: TransactionChange) -> None:
        payload: dict[str, Any] = {k: v for k, v in event.items() if k != "type"}
        await self.send_json(payload)

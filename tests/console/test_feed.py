"""The console's websocket feed, through the real ASGI application and the Redis channel layer."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import transaction

from broker.services.transactions import transaction_end, transaction_prepare
from console.consumers import TransactionFeedConsumer
from halfmoon.asgi import application


async def _anonymous_is_refused() -> tuple[bool, object]:
    communicator = WebsocketCommunicator(
        application, "/ws/transactions/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    connected, code = await communicator.connect()
    await communicator.disconnect()
    return connected, code


def test_an_anonymous_visitor_is_refused():
    connected, code = async_to_sync(_anonymous_is_refused)()
    assert connected is False
    assert code == 4401


async def _receive_after(user, action) -> dict:
    communicator = WebsocketCommunicator(TransactionFeedConsumer.as_asgi(), "/ws/transactions/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    try:
        from asgiref.sync import sync_to_async

        await sync_to_async(action)()
        return await communicator.receive_json_from(timeout=5)
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_sees_a_commit_as_it_happens(topic, producer_group):
    staff = get_user_model().objects.create_user("operator", password="x", is_staff=True)
    tx, _ = transaction_prepare(producer_group="G", topic="TranTest", body=b"Hello RocketMQ 1")

    def commit() -> None:
        with transaction.atomic():
            transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")

    event = async_to_sync(_receive_after)(staff, commit)
    assert event["kind"] == "resolved"
    assert event["transaction_id"] == tx.transaction_id
    assert event["state"] == "COMMITTED"
    assert event["producer_group"] == "G"

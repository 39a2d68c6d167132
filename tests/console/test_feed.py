"""The console's websocket feed, through the real ASGI application (``halfmoon.asgi``, with
``AllowedHostsOriginValidator`` and ``AuthMiddlewareStack``) and the Redis channel layer.

Users sign in through the session: a Django test client's ``force_login`` stores a session,
whose cookie the websocket handshake sends, as a browser would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.test import Client

from broker.plumbing import events
from broker.plumbing.events import (
    BULK_ACTIONS_GROUP,
    TRANSACTIONS_GROUP,
    BulkActionProgress,
    announcements_coalesce,
    bulk_action_progress_publish,
)
from broker.rules.clock import now_ms
from broker.services.commitlog.batch import transaction_end_batch, transaction_prepare_batch
from broker.services.transactions.end import transaction_end
from broker.services.transactions.half import transaction_prepare
from halfmoon.asgi import application

ORIGIN = (b"origin", b"http://127.0.0.1")
TIMEOUT_S = 5


def session_headers(user: AbstractUser | None) -> list[tuple[bytes, bytes]]:
    """The handshake's headers: an allowed Origin, and the session cookie of ``user`` signed
    in (none for ``None``)."""
    if user is None:
        return [ORIGIN]
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [ORIGIN, (b"cookie", cookie.encode())]


def handshake(user: AbstractUser | None) -> tuple[bool, Any]:
    """Connect to ``/ws/transactions/`` as ``user``; returns (accepted, close code)."""
    headers = session_headers(user)

    async def run() -> tuple[bool, Any]:
        communicator = WebsocketCommunicator(application, "/ws/transactions/", headers=headers)
        connected, code = await communicator.connect(timeout=TIMEOUT_S)
        await communicator.disconnect()
        return connected, code

    return async_to_sync(run)()


def received_after(user: AbstractUser, *actions: Callable[[], None], count: int) -> list[dict]:
    """Connect as ``user``, run each action (in a thread, as a request would) and return the
    first ``count`` messages the feed sends."""
    headers = session_headers(user)

    async def run() -> list[dict]:
        communicator = WebsocketCommunicator(application, "/ws/transactions/", headers=headers)
        connected, code = await communicator.connect(timeout=TIMEOUT_S)
        assert connected, code
        try:
            for action in actions:
                await sync_to_async(action)()
            return [await communicator.receive_json_from(timeout=TIMEOUT_S) for _ in range(count)]
        finally:
            await communicator.disconnect()

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
def test_an_anonymous_visitor_is_refused():
    assert handshake(None) == (False, 4401)


@pytest.mark.django_db(transaction=True)
def test_a_user_without_the_view_permission_is_refused(console_user):
    staff_but_no_role = console_user(None)
    staff_but_no_role.is_staff = True
    staff_but_no_role.save()
    assert handshake(staff_but_no_role) == (False, 4403)


@pytest.mark.django_db(transaction=True)
def test_a_foreign_origin_is_refused():
    async def run() -> bool:
        communicator = WebsocketCommunicator(
            application, "/ws/transactions/", headers=[(b"origin", b"http://evil.example")]
        )
        connected, _ = await communicator.connect(timeout=TIMEOUT_S)
        await communicator.disconnect()
        return connected

    assert async_to_sync(run)() is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_console_role_is_accepted(console_user, role):
    assert handshake(console_user(role)) == (True, None)


@pytest.mark.django_db(transaction=True)
def test_a_viewer_sees_a_half_message_then_its_commit(console_user, topic, producer_group):
    ids: list[str] = []

    def prepare() -> None:
        tx, _ = transaction_prepare(producer_group="G", topic="TranTest", body=b"Hello RocketMQ")
        ids.append(tx.transaction_id)

    def commit() -> None:
        transaction_end(transaction_id=ids[0], producer_group="G", action="commit")

    prepared, resolved = received_after(console_user("viewer"), prepare, commit, count=2)

    assert prepared["stream"] == "transaction"
    assert "type" not in prepared
    assert prepared["kind"] == "prepared"
    assert prepared["transaction_id"] == ids[0]
    assert prepared["state"] == "PREPARED"
    assert (prepared["producer_group"], prepared["topic"]) == ("G", "TranTest")
    assert resolved["stream"] == "transaction"
    assert resolved["kind"] == "resolved"
    assert resolved["transaction_id"] == ids[0]
    assert resolved["state"] == "COMMITTED"


@pytest.mark.django_db(transaction=True)
def test_a_viewer_sees_bulk_action_progress(console_user):
    event: BulkActionProgress = {
        "type": "bulk.progress",
        "bulk_id": 7,
        "action": "rollback",
        "state": "running",
        "total": 3,
        "processed": 1,
        "counts": {"done": 1, "already_ended": 0, "failed": 0},
        "timestamp": now_ms(),
    }

    (message,) = received_after(
        console_user("viewer"), lambda: bulk_action_progress_publish(event), count=1
    )

    expected = {k: v for k, v in event.items() if k != "type"}
    assert message == {"stream": "bulk", **expected}


def _change(n: int, kind: str = "prepared") -> dict[str, Any]:
    return {
        "type": "transaction.event",
        "kind": kind,
        "transaction_id": f"T{n}",
        "producer_group": "G",
        "topic": "TranTest",
        "state": "PREPARED",
        "check_times": 0,
        "timestamp": n,
    }


def test_events_queued_together_go_as_one_message_per_group_in_order():
    """What the publisher sends for events queued while it was busy: runs of one group become
    one ``<type>s`` message with the events in order; a lone event goes as itself."""
    bulk = {"type": "bulk.progress", "bulk_id": 1}
    waiting = [
        (TRANSACTIONS_GROUP, _change(1)),
        (TRANSACTIONS_GROUP, _change(2)),
        (BULK_ACTIONS_GROUP, bulk),
        (TRANSACTIONS_GROUP, _change(3)),
    ]

    messages = announcements_coalesce(waiting)

    assert messages == [
        (TRANSACTIONS_GROUP, {"type": "transaction.events", "events": [_change(1), _change(2)]}),
        (BULK_ACTIONS_GROUP, bulk),
        (TRANSACTIONS_GROUP, _change(3)),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_viewer_sees_each_event_of_aannouncements_coalesce_message_in_order(console_user):
    events = [_change(n, kind) for n, kind in enumerate(["prepared", "resolved", "discarded"])]

    def publish() -> None:
        async_to_sync(get_channel_layer().group_send)(
            TRANSACTIONS_GROUP, {"type": "transaction.events", "events": events}
        )

    messages = received_after(console_user("viewer"), publish, count=3)

    assert messages == [
        {"stream": "transaction", **{k: v for k, v in e.items() if k != "type"}} for e in events
    ]


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_commits_reaches_the_feed_once_each_in_order(
    console_user, topic, producer_group
):
    """32 half messages and their commits in two batches: 64 events, published in few
    channel-layer messages, each relayed once, every prepared before its resolved."""
    ids: list[str] = []

    def send() -> None:
        sends = [{"producer_group": "G", "topic": "TranTest", "body": b"x"} for _ in range(32)]
        ids.extend(tx.transaction_id for tx, _ in transaction_prepare_batch(sends=sends))

    def commit() -> None:
        ends = [{"transaction_id": t, "producer_group": "G", "action": "commit"} for t in ids]
        transaction_end_batch(ends=ends)

    messages = received_after(console_user("viewer"), send, commit, count=64)

    seen = [(m["kind"], m["transaction_id"]) for m in messages]
    assert sorted(seen) == sorted([("prepared", t) for t in ids] + [("resolved", t) for t in ids])
    assert max(seen.index(("prepared", t)) for t in ids) < min(
        seen.index(("resolved", t)) for t in ids
    )


def test_events_submitted_within_the_linger_go_in_one_message(monkeypatch):
    """The publisher waits ``LINGER_S`` after an event for more before it sends (a Kafka
    producer's linger.ms): two commits 10 ms apart cost one channel-layer message, not two."""
    sent: list[tuple[str, dict]] = []
    arrived = threading.Event()

    class RecordingLayer:
        async def group_send(self, group: str, message: dict) -> None:
            sent.append((group, message))
            arrived.set()

    monkeypatch.setattr(events, "get_channel_layer", lambda: RecordingLayer())
    publisher = events._Publisher()

    publisher.submit(TRANSACTIONS_GROUP, [_change(1)])
    time.sleep(0.01)
    publisher.submit(TRANSACTIONS_GROUP, [_change(2)])

    assert arrived.wait(TIMEOUT_S)
    time.sleep(0.2)  # anything sent apart would be here by now
    assert sent == [
        (TRANSACTIONS_GROUP, {"type": "transaction.events", "events": [_change(1), _change(2)]})
    ]

"""Back-checks of half messages sent over gRPC, written on a live client's telemetry stream
(broker/services/checks/telemetry.py) through a gRPC server process's command channel
(broker/plumbing/telemetry_bus.py), here a real ``TelemetryCommandListener`` on the test Redis
whose handler stands for the server's streams."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from broker.models import ClientConnection, ProducerGroup, TransactionEvent
from broker.plumbing.telemetry_bus import TelemetryCommandListener
from broker.rules.clock import now_ms
from broker.services.checks.telemetry import RECOVER_ORPHANED_TRANSACTION
from tests.services.checks.helpers import refreshed
from tests.support import due_at, prepare, round_for


class Streams:
    """A gRPC server process's live telemetry streams, as its command handler sees them: the
    commands written per client, for the clients it holds."""

    def __init__(self, server_id: str) -> None:
        self.server_id = server_id
        self.held: set[str] = set()
        self.written: list[dict[str, Any]] = []
        self.listener = TelemetryCommandListener(self._write, server_id=server_id)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _write(self, command: dict[str, Any]) -> bool:
        if command["client_id"] not in self.held:
            return False
        self.written.append(command)
        return True

    def __enter__(self) -> Streams:
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self.listener.run(), self.loop)
        subscribed = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(self.listener.subscribed.wait(), 10), self.loop
        )
        subscribed.result(timeout=15)
        return self

    def __exit__(self, *exc: object) -> None:
        self.task.cancel()
        asyncio.run_coroutine_threadsafe(_others_finished(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


async def _others_finished() -> None:
    """Wait for the loop's other tasks (the cancelled listener closing its connections)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.gather(*others, return_exceptions=True)


@pytest.fixture
def streams(db) -> Iterator[Streams]:
    with Streams("test-server:1:aa") as s:
        yield s


def client(
    client_id: str,
    *,
    server: str,
    groups: list[str] | None = None,
    topics: list[str] | None = None,
    heard_ms_ago: int = 0,
    **fields: Any,
) -> ClientConnection:
    return ClientConnection.objects.create(
        client_id=client_id,
        kind=ClientConnection.Kind.PRODUCER,
        producer_groups=["G"] if groups is None else groups,
        topics=["TranTest"] if topics is None else topics,
        server=server,
        last_heartbeat_timestamp=now_ms() - heard_ms_ago,
        **fields,
    )


def check_events(tx_id: str) -> list[TransactionEvent]:
    return list(TransactionEvent.objects.filter(transaction_id=tx_id).order_by("id"))


def test_a_grpc_half_message_is_checked_on_its_senders_stream(
    topic, producer_group, broker_settings, streams
):
    streams.held |= {"sender", "other"}
    client("other", server=streams.server_id)
    client("sender", server=streams.server_id, heard_ms_ago=1000)
    tx = prepare(producer_client_id="sender")

    result = round_for(tx, due_at(tx))

    [command] = streams.written
    assert command["type"] == RECOVER_ORPHANED_TRANSACTION
    assert command["client_id"] == "sender"
    assert command["transaction_id"] == tx.transaction_id
    assert command["commit_log_offset"] == tx.half_commit_log_offset
    assert command["check_times"] == 1
    [outcome] = result["outcomes"]
    assert outcome.delivered and outcome.action is None and outcome.client_id == "sender"
    assert refreshed(tx).check_times == 1
    [event] = check_events(tx.transaction_id)
    assert (event.kind, event.actor, event.outcome) == ("check_sent", "telemetry", "ACCEPTED")
    assert event.detail["client_id"] == "sender"


def test_when_the_sender_is_gone_another_client_of_the_group_publishing_the_topic_is_checked(
    topic, producer_group, broker_settings, streams
):
    streams.held |= {"gone", "expired", "other-topic", "other-group", "next"}
    client("gone", server=streams.server_id, disconnected_timestamp=now_ms())
    client("expired", server=streams.server_id, heard_ms_ago=10 * 60_000)
    client("other-topic", server=streams.server_id, topics=["Elsewhere"])
    client("other-group", server=streams.server_id, groups=["H"])
    client("next", server=streams.server_id, heard_ms_ago=5000)
    tx = prepare(producer_client_id="gone")

    round_for(tx, due_at(tx))

    assert [c["client_id"] for c in streams.written] == ["next"]
    assert refreshed(tx).check_times == 1
    assert check_events(tx.transaction_id)[0].detail["client_id"] == "next"


def test_a_stream_the_server_no_longer_holds_passes_the_check_to_the_next_client(
    topic, producer_group, broker_settings, streams
):
    streams.held |= {"second"}  # "first" is registered but its stream ended in the server
    client("first", server=streams.server_id)
    client("second", server=streams.server_id, heard_ms_ago=2000)
    tx = prepare(producer_client_id="first")

    round_for(tx, due_at(tx))

    assert [c["client_id"] for c in streams.written] == ["second"]
    assert refreshed(tx).check_times == 1


def test_a_check_that_reaches_no_live_client_is_undelivered_and_not_counted(
    topic, producer_group, broker_settings, streams
):
    client("on-a-stopped-server", server="stopped-server:9:ff")
    tx = prepare(producer_client_id="on-a-stopped-server")
    now = due_at(tx)

    result = round_for(tx, now)

    [outcome] = result["outcomes"]
    assert not outcome.delivered
    assert "on-a-stopped-server" in outcome.error
    tx = refreshed(tx)
    assert tx.check_times == 0 and tx.undelivered_checks == 1
    assert tx.next_check_timestamp == now + broker_settings["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"]
    [event] = check_events(tx.transaction_id)
    assert (event.kind, event.actor) == ("check_undelivered", "telemetry")
    group = ProducerGroup.objects.get(name="G")
    assert group.unreachable_since == now
    assert "on-a-stopped-server" in group.last_check_error
    assert streams.written == []


def test_no_client_at_all_says_so(topic, producer_group, broker_settings, streams):
    tx = prepare(producer_client_id="never-connected")

    [outcome] = round_for(tx, due_at(tx))["outcomes"]

    assert not outcome.delivered
    assert outcome.error == "no live gRPC client of producer group G publishing TranTest"


def test_http_half_messages_of_the_same_group_still_go_to_the_webhook_or_the_poll(
    topic, producer_group, broker_settings, streams
):
    streams.held |= {"sender"}
    client("sender", server=streams.server_id)
    over_http = prepare()

    result = round_for(over_http, due_at(over_http))

    assert result["jobs"] == [] and streams.written == []  # group G polls: a CheckRequest
    assert over_http.check_requests.count() == 1

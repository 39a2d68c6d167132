"""Fixtures of the back-check tests: a producer's check server, producer group G answering at it,
every transaction on half queue 0, ports that never answer or refuse, and the rate limiter's
Redis counters cleared around each test."""

from __future__ import annotations

import socket

import pytest
import redis

from broker.models import ProducerGroup
from broker.plumbing import rate_counter
from broker.services.topology.writes import producer_group_create
from tests.support import CheckServer

RATE_KEYS = "halfmoon:check-rate:*"


@pytest.fixture(autouse=True)
def _op_journal_flushed_at_once(broker_settings):
    """These tests set up flushed Op journals; RIP-50's batching rule (full messages at once,
    the rest after HALFMOON_OP_BATCH_INTERVAL_MS) has its own tests in test_op_batching.py."""
    broker_settings["HALFMOON_OP_BATCH_INTERVAL_MS"] = 0


@pytest.fixture(autouse=True)
def rate_redis(settings, monkeypatch):
    """The per-group rate counters, in this test run's Redis database (``REDIS_URL``), with no
    counter of another test left in them; a fresh client for the rate limiter."""
    client = redis.Redis.from_url(settings.REDIS_URL)

    def clear() -> None:
        for key in client.scan_iter(RATE_KEYS):
            client.delete(key)

    clear()
    monkeypatch.setattr(rate_counter, "_redis_client", None)
    yield client
    clear()
    client.close()


@pytest.fixture
def check_server():
    with CheckServer() as server:
        yield server


@pytest.fixture
def http_group(db, check_server) -> ProducerGroup:
    """Producer group G answering back-checks at the check server's URL."""
    group = producer_group_create(name="G", check_url=check_server.url)
    check_server.secrets["G"] = group.check_secret
    return group


@pytest.fixture
def one_queue(topic, broker_settings):
    """Every transaction on half queue 0, due as soon as it is stored."""
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    return broker_settings


@pytest.fixture
def silent_url():
    """A URL whose port completes the TCP handshake (the kernel's accept queue) but never reads
    or answers: every request is sent and then times out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # a port of its own: the xdist workers run side by side
    sock.listen(4096)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/check"
    finally:
        sock.close()


@pytest.fixture
def refused_url():
    """A URL whose port is held (bound) but not listening: connection refused, every time."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # a port of its own: the xdist workers run side by side
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/check"
    finally:
        sock.close()

"""End to end: the web servers as the quick start runs them (``python -m halfmoon.web``, each
with its own listening socket on one address, SO_REUSEPORT): the kernel spreads connections
over them, and one that dies leaves the address served by the others."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from tests.e2e.processes import Stack, broker_env, free_port
from tests.e2e.session import migrated_database

pytestmark = pytest.mark.e2e

PG_DATABASE = "halfmoon_e2e_web"
REDIS_URL = "redis://127.0.0.1:6379/1"
CONNECTIONS = 40


@pytest.fixture
def webs(tmp_path: Path) -> Iterator[tuple[str, Stack]]:
    """Two web processes on one free port, on a migrated database of their own."""
    with redis.Redis.from_url(REDIS_URL) as r:
        r.flushdb()
    with migrated_database(PG_DATABASE) as database_url:
        env = broker_env(database_url=database_url, redis_url=REDIS_URL, var_dir=tmp_path / "var")
        stack = Stack(env, tmp_path)
        try:
            yield stack.start_web(free_port(), processes=2), stack
        finally:
            stack.stop()


def owners(stack: Stack, port: int) -> dict[str, int]:
    """How many established connections to ``port`` each web process holds."""
    counts = {}
    for name in ("web", "web2"):
        connections = psutil.Process(stack.procs[name].pid).net_connections(kind="tcp")
        counts[name] = sum(
            1 for c in connections if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
        )
    return counts


def test_connections_are_spread_over_the_web_processes(webs) -> None:
    url, stack = webs
    port = int(url.rsplit(":", 1)[1])
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNECTIONS)]
    try:
        for client in clients:  # one request on each keep-alive connection: it is accepted
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for client in clients:
            assert client.recv(65536).startswith(b"HTTP/1.1 "), "no answer"
        counts = owners(stack, port)
    finally:
        for client in clients:
            client.close()

    assert sum(counts.values()) == CONNECTIONS, counts
    # The kernel hashes connections over the two sockets: far from all on one (with one
    # shared socket, asyncio's accept loop gives a burst of connections to one process).
    assert min(counts.values()) >= CONNECTIONS // 5, counts


def test_a_killed_web_process_leaves_the_address_served(webs) -> None:
    url, stack = webs
    os.killpg(stack.procs["web2"].pid, signal.SIGKILL)
    stack.procs["web2"].wait(timeout=10)
    del stack.procs["web2"]  # gone on purpose: the stack's liveness checks skip it

    answers = []
    for _ in range(20):
        with httpx.Client(timeout=5) as client:  # a new connection each time
            answers.append(client.get(f"{url}/healthz").status_code)
        time.sleep(0.05)

    assert answers == [200] * 20

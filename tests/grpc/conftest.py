"""An in-process gRPC server (``broker.grpc.server.GrpcServer`` on a free port, its event loop
in a thread of its own) and stubs for it. Its calls run in its worker threads, on their own
database connections: the tests using it are ``transaction=True`` tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.grpc.server import GrpcServer

START_TIMEOUT_S = 20


@dataclass
class RunningServer:
    """A started server: ``port``, ``endpoint`` (what routes name), ``server`` (the
    ``GrpcServer``) and ``loop`` (its event loop, in another thread)."""

    server: GrpcServer
    loop: asyncio.AbstractEventLoop

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def run(self, coroutine: Any, timeout_s: float = START_TIMEOUT_S) -> Any:
        """Run ``coroutine`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)


@pytest.fixture
def grpc_settings(settings: Any) -> Any:
    """Anonymous gRPC calls allowed (the tests of signatures turn it off)."""
    settings.HALFMOON_GRPC_ALLOW_ANONYMOUS = True
    settings.HALFMOON_GRPC_ENDPOINT = ""
    return settings


@pytest.fixture
def grpc_server(transactional_db: None, grpc_settings: Any) -> Iterator[RunningServer]:
    """A ``GrpcServer`` on 127.0.0.1 and a free port, stopped after the test."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="grpc-test-loop", daemon=True)
    thread.start()
    server = GrpcServer("127.0.0.1", 0, threads=4)
    running = RunningServer(server, loop)
    running.run(server.start())
    running.run(server.listener.subscribed.wait())
    try:
        yield running
    finally:
        running.run(server.stop(grace_s=0.5))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(START_TIMEOUT_S)
        loop.close()


@pytest.fixture
def channel(grpc_server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_server.port}") as chan:
        yield chan


@pytest.fixture
def stub(channel: grpc.Channel) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(channel)


def metadata(client_id: str = "client-1", **extra: str) -> list[tuple[str, str]]:
    """The headers a RocketMQ client sends (``x-mq-client-id`` and the others)."""
    headers = {
        "x-mq-client-id": client_id,
        "x-mq-language": "PYTHON",
        "x-mq-client-version": "5.1.2",
        "x-mq-protocol": "v2",
        **extra,
    }
    return list(headers.items())


@pytest.fixture(autouse=True)
def main_thread_event_loop() -> Iterator[None]:
    """A current event loop in the main thread, as a fresh process has. The official client
    (5.1.2) opens its Telemetry stream with ``grpc.aio`` from the calling thread, which needs
    one there; a test run before in the same process can leave the main thread without it
    (``asyncio.run`` does), and in CI the client then logged "There is no current event loop
    in thread 'MainThread'" and failed to fetch its route."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()

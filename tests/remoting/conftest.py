"""An in-process remoting server (``broker.remoting.server.RemotingServer`` on free ports, its
event loop in a thread of its own) and a blocking RocketMQ 4.x frame client for it. Its calls
run in its worker threads, on their own database connections: the tests using it are
``transaction=True`` tests."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from broker.remoting.server import RemotingServer
from broker.rules.remoting_frames import RemotingCommand, frame_decode

TIMEOUT_S = 20


@dataclass
class RunningServer:
    """A started server and its event loop (in another thread)."""

    server: RemotingServer
    loop: asyncio.AbstractEventLoop

    @property
    def namesrv_port(self) -> int:
        return self.server.ports[0]

    @property
    def broker_port(self) -> int:
        return self.server.ports[1]

    def run(self, coroutine: Any, timeout_s: float = TIMEOUT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)


class FrameClient:
    """A blocking client of one connection: ``request`` sends a frame as the cpp client does
    (JSON header, language CPP, version 63, its own opaque) and ``read`` reads the next one."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.opaque = 0

    def send(self, code: int, ext: dict[str, Any], body: bytes = b"", flag: int = 0) -> int:
        header = {
            "code": code,
            "extFields": ext,
            "flag": flag,
            "language": "CPP",
            "opaque": self.opaque,
            "remark": "",
            "version": 63,
        }
        encoded = json.dumps(header).encode()
        self.sock.sendall(
            struct.pack(">ii", 4 + len(encoded) + len(body), len(encoded)) + encoded + body
        )
        self.opaque += 1
        return self.opaque - 1

    def read(self) -> RemotingCommand:
        (length,) = struct.unpack(">i", self._exactly(4))
        return frame_decode(self._exactly(length))

    def request(self, code: int, ext: dict[str, Any], body: bytes = b"") -> RemotingCommand:
        opaque = self.send(code, ext, body)
        response = self.read()
        assert response.opaque == opaque and response.flag == 1, response
        return response

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def remoting_settings(settings: Any) -> Any:
    """Anonymous remoting calls allowed, routes naming the default address."""
    settings.HALFMOON_REMOTING_ALLOW_ANONYMOUS = True
    settings.HALFMOON_REMOTING_THREADS = 4
    return settings


@pytest.fixture
def remoting_server(transactional_db: None, remoting_settings: Any) -> Iterator[RunningServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="remoting-test-loop", daemon=True)
    thread.start()
    server = RemotingServer("127.0.0.1", 0, 0)
    running = RunningServer(server, loop)
    running.run(server.start())
    assert server.listener is not None
    running.run(server.listener.subscribed.wait())
    try:
        yield running
    finally:
        running.run(server.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT_S)
        loop.close()


@pytest.fixture
def client(remoting_server: RunningServer) -> Iterator[FrameClient]:
    connected = FrameClient(remoting_server.broker_port)
    try:
        yield connected
    finally:
        connected.close()

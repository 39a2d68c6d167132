"""The remoting server of one process: the NameServer port and the broker port (one dispatcher
serves both: a client asks the NameServer for routes and the broker for everything else), the
connections of its clients by client id, and the listener writing back-checks on them
(``broker.plumbing.telemetry_bus``, the check service's telemetry transport)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable

from django.conf import settings

from broker.plumbing.service_threads import Workers
from broker.plumbing.telemetry_bus import TelemetryCommandListener, telemetry_server_id
from broker.remoting import codes
from broker.remoting.checks import CheckWriter
from broker.remoting.connection import Connection
from broker.remoting.producers import Advertised, ProducerHandlers
from broker.rules.remoting_frames import RemotingCommand, response_of
from broker.services.topology import clients

logger = logging.getLogger("halfmoon.remoting")

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


def advertised_of(address: str, port: int) -> Advertised:
    """The broker endpoint routes name: ``address`` ("host:port", the host resolved to its
    IPv4 address: the offsetMsgId holds 4 bytes) or, empty, 127.0.0.1 and ``port``.

    Raises:
        ValueError: a malformed address or a host without an IPv4 address.
    """
    if not address:
        return Advertised("127.0.0.1", port)
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"HALFMOON_REMOTING_ADVERTISED_ADDRESS {address!r} is not host:port")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        host = socket.gethostbyname(host)
    return Advertised(host, int(port_text))


class RemotingServer:
    """Serves RocketMQ 4.x clients on ``host``: ``namesrv_port`` and ``broker_port`` (0: any
    free port, read back from ``ports`` once started)."""

    def __init__(
        self, host: str, namesrv_port: int, broker_port: int, advertised: str = ""
    ) -> None:
        self.host = host
        self.requested = (namesrv_port, broker_port)
        self.advertised_address = advertised
        self.ports: tuple[int, int] = (0, 0)
        self.server_id = telemetry_server_id()
        self.workers = Workers(settings.HALFMOON_REMOTING_THREADS, "remoting")
        self._connections: dict[str, list[Connection]] = {}
        self._servers: list[asyncio.Server] = []
        self._serving: set[asyncio.Task[None]] = set()
        self._open: set[Connection] = set()
        self._listener_task: asyncio.Task[None] | None = None
        self.listener: TelemetryCommandListener | None = None

    async def start(self) -> None:
        """Listen on both ports (SO_REUSEPORT: several processes may serve them) and subscribe
        to this process's check channel."""
        for port in self.requested:
            self._servers.append(
                await asyncio.start_server(self._serve, self.host, port, reuse_port=True)
            )
        self.ports = tuple(s.sockets[0].getsockname()[1] for s in self._servers)  # type: ignore[assignment]
        advertised = advertised_of(self.advertised_address, self.ports[1])
        self.producers = ProducerHandlers(
            workers=self.workers, advertised=advertised, server_id=self.server_id
        )
        self.handlers: dict[int, Handler] = {
            codes.GET_ROUTEINFO_BY_TOPIC: self.producers.route,
            codes.HEART_BEAT: self._heartbeat,
            codes.UNREGISTER_CLIENT: self.producers.unregister,
            codes.SEND_MESSAGE: self.producers.send,
            codes.SEND_MESSAGE_V2: self.producers.send,
            codes.END_TRANSACTION: self.producers.end_transaction,
        }
        writer = CheckWriter(
            connections=self.connections_of, workers=self.workers, advertised=advertised
        )
        self.listener = TelemetryCommandListener(writer.command_write, server_id=self.server_id)
        self._listener_task = asyncio.get_running_loop().create_task(self.listener.run())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.listener.subscribed.wait(), 5)
        logger.info(
            "remoting: NameServer on %s:%s, broker on %s:%s, routes name %s",
            self.host,
            self.ports[0],
            self.host,
            self.ports[1],
            advertised.address,
        )

    async def stop(self) -> None:
        """Stop listening, close the clients' connections, end the check listener."""
        for server in self._servers:
            server.close()
        for conn in list(self._open):
            conn.writer.close()
        if self._serving:  # their clients disconnected in the database
            await asyncio.wait(self._serving, timeout=5)
        if self._listener_task is not None:
            self._listener_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener_task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        self.workers.shutdown()

    def connections_of(self, client_id: str) -> list[Connection]:
        """This process's open connections of ``client_id``, oldest first."""
        return list(self._connections.get(client_id, ()))

    async def _heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        response = await self.producers.heartbeat(conn, request)
        if conn.client_id:
            held = self._connections.setdefault(conn.client_id, [])
            if conn not in held:
                held.append(conn)
        return response

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        self._open.add(conn)
        try:
            await conn.serve(self._dispatch)
        finally:
            self._open.discard(conn)
            held = self._connections.get(conn.client_id, [])
            if conn in held:
                held.remove(conn)
                if not held:
                    del self._connections[conn.client_id]
                    await self.workers.run(
                        clients.client_disconnect, client_id=conn.client_id, server=self.server_id
                    )

    async def _dispatch(self, conn: Connection, request: RemotingCommand) -> None:
        """Answer one request (a code not served: REQUEST_CODE_NOT_SUPPORTED); requests of
        ``codes.NO_RESPONSE`` and oneway ones get no answer. While anonymous calls are not
        allowed (no ACL is checked yet), every request is NO_PERMISSION."""
        handler = self.handlers.get(request.code)
        try:
            if not settings.HALFMOON_REMOTING_ALLOW_ANONYMOUS:
                response = response_of(
                    request,
                    codes.NO_PERMISSION,
                    remark="RocketMQ 4.x ACL is not served yet: set "
                    "HALFMOON_REMOTING_ALLOW_ANONYMOUS=true to serve remoting clients.",
                )
            elif handler is None:
                response = response_of(
                    request,
                    codes.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f"Request code {request.code} is not served by Halfmoon.",
                )
            else:
                response = await handler(conn, request)
        except Exception as exc:
            logger.exception("remoting request %s from %s failed", request.code, conn.peer)
            response = response_of(
                request, codes.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}"
            )
        if response is None or request.oneway or request.code in codes.NO_RESPONSE:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await conn.write(response)

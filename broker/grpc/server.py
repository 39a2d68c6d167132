"""The gRPC server of one process: grpcio's asyncio server serving ``MessagingService``
(``broker.grpc.service``) on a port opened with ``SO_REUSEPORT`` (several processes may serve
one port; the kernel spreads the connections), plaintext or TLS, with this process's telemetry
streams (``broker.grpc.telemetry``) and its subscription to the telemetry command bus
(``broker.plumbing.telemetry_bus.TelemetryCommandListener``), through which back-checks reach
the streams it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import grpc
from django.conf import settings
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.conf import conf
from broker.grpc.service import MessagingService
from broker.grpc.telemetry import TelemetryRegistry
from broker.plumbing.service_threads import Workers
from broker.plumbing.telemetry_bus import TelemetryCommandListener, telemetry_server_id

logger = logging.getLogger("halfmoon.grpc")

MESSAGE_OVERHEAD_BYTES = 1024 * 1024
"""What a request may carry besides a body and its properties (headers, system properties)."""


def grpc_endpoint(host: str, port: int) -> str:
    """The address routes name (``host:port``): ``HALFMOON_GRPC_ENDPOINT`` when set, else
    ``host`` (bracketed if IPv6) and ``port``, or the machine's host name when ``host`` is a
    wildcard address (``0.0.0.0``, ``::``)."""
    if settings.HALFMOON_GRPC_ENDPOINT:
        return settings.HALFMOON_GRPC_ENDPOINT
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 - a comparison, not a bind
        host = socket.gethostname()
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _credentials() -> grpc.ServerCredentials | None:
    """TLS credentials from ``HALFMOON_GRPC_TLS_CERT_FILE`` and ``HALFMOON_GRPC_TLS_KEY_FILE``
    (PEM), or None (plaintext) when they are unset."""
    if not settings.HALFMOON_GRPC_TLS_CERT_FILE:
        return None
    key = Path(settings.HALFMOON_GRPC_TLS_KEY_FILE).read_bytes()
    cert = Path(settings.HALFMOON_GRPC_TLS_CERT_FILE).read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])


class GrpcServer:
    """One process's gRPC server: ``await start()``, then ``await stop()``.

    Args:
        host, port: where to listen (port 0: a free port, read back from ``port`` after start).
        endpoint: the address routes name; default ``grpc_endpoint(host, port)``.
        threads: worker threads for service calls; default ``HALFMOON_GRPC_THREADS``.
    """

    def __init__(
        self, host: str, port: int, *, endpoint: str | None = None, threads: int | None = None
    ) -> None:
        self.host = host
        self.port = port
        self._endpoint = endpoint
        self.workers = Workers(threads or settings.HALFMOON_GRPC_THREADS, "grpc")
        self.registry = TelemetryRegistry(self.workers.run)
        self.listener = TelemetryCommandListener(self.registry.command_write)
        self.server: grpc.aio.Server | None = None
        self.service: MessagingService | None = None
        self._listening: asyncio.Task[None] | None = None
        self.tls = False

    async def start(self) -> None:
        """Bind, start serving and subscribe to the telemetry command bus.

        Raises:
            RuntimeError: the address cannot be bound (grpcio's error).
        """
        limit = conf.max_message_size + conf.max_properties_size + MESSAGE_OVERHEAD_BYTES
        self.server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 1),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ]
        )
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        credentials = _credentials()
        self.tls = credentials is not None
        if credentials is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, credentials)
        self.service = MessagingService(
            endpoint=self._endpoint or grpc_endpoint(self.host, self.port),
            workers=self.workers,
            registry=self.registry,
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, self.server)
        await self.server.start()
        self._listening = asyncio.get_running_loop().create_task(self.listener.run())
        logger.info(
            "gRPC server %s serving MessagingService on %s:%d (%s), routes name %s",
            telemetry_server_id(),
            self.host,
            self.port,
            "TLS" if self.tls else "plaintext",
            self.service.endpoint,
        )

    @property
    def endpoint(self) -> str:
        """The address routes name."""
        assert self.service is not None, "not started"
        return self.service.endpoint

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting calls, let running ones finish for ``grace_s`` seconds (then they
        are cancelled: telemetry streams end, their clients reconnect elsewhere), unsubscribe
        from the bus and stop the worker threads."""
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        if self.server is not None:
            await self.server.stop(grace_s)
        if self.service is not None:
            await self.service.drain()
        self.workers.shutdown()

    async def wait(self) -> None:
        """Until the server stops."""
        assert self.server is not None, "not started"
        await self.server.wait_for_termination()

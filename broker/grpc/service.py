"""RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` served from Halfmoon's services (the
RocketMQ proxy's ``grpc/v2`` activities): thin handlers that read the request, run one service
call (with the caller's authentication) in a worker thread, and answer its result or its error
as a ``Status`` (``broker.grpc.convert.error_status``). A call's failure is always an answer
with a status, never a gRPC error, as the clients expect. The handlers live by call family in
``broker.grpc.calls``; ``MessagingService`` composes them.

The calls Halfmoon does not serve (PullMessage, UpdateOffset, GetOffset, QueryOffset,
SyncLiteSubscription) answer gRPC UNIMPLEMENTED with a message saying so.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.grpc.calls.consumers import ConsumerCalls
from broker.grpc.calls.producers import ProducerCalls
from broker.grpc.calls.recall import RecallCalls
from broker.grpc.calls.routes import RouteCalls
from broker.grpc.calls.telemetry import TelemetryCalls
from broker.grpc.convert import endpoints_of
from broker.grpc.group_commit import GroupCommit
from broker.grpc.telemetry import TelemetryRegistry
from broker.plumbing.service_threads import Workers
from broker.services.commitlog.batch import transaction_end_batch, transaction_prepare_batch


class MessagingService(
    RouteCalls,
    ProducerCalls,
    RecallCalls,
    ConsumerCalls,
    TelemetryCalls,
    service_pb2_grpc.MessagingServiceServicer,
):
    """The servicer. ``endpoint``: the address routes name (``host:port``); ``workers``: the
    threads running service calls; ``registry``: this process's telemetry streams."""

    def __init__(self, *, endpoint: str, workers: Workers, registry: TelemetryRegistry) -> None:
        self.endpoint = endpoint
        self.endpoints = endpoints_of(endpoint)
        self.workers = workers
        self.registry = registry
        self._published: set[tuple[str, str, str]] = set()
        self.half_messages = GroupCommit(workers, transaction_prepare_batch, keyword="sends")
        self.ends = GroupCommit(workers, transaction_end_batch, keyword="ends")
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- not served ---------------------------------------------------------------------------

    async def _unimplemented(self, context: grpc.aio.ServicerContext, call: str) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"Halfmoon does not serve {call}: it serves RocketMQ's transactional, normal and "
            "delay messages to producers, SimpleConsumers and PushConsumers.",
        )

    async def PullMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "PullMessage")

    async def UpdateOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "UpdateOffset")

    async def GetOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "GetOffset")

    async def QueryOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "QueryOffset")

    async def SyncLiteSubscription(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "SyncLiteSubscription")

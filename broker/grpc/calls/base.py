"""What the call families of ``MessagingService`` share: ``CallsBase`` (the servicer's state, a
call run in a worker thread with the caller's authentication), ``answered`` (an error as the
answer's status) and the checks several families make."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker.errors import Forbidden, not_found
from broker.grpc.auth import CallMetadata, call_metadata, caller_authenticate, namespace_check
from broker.grpc.convert import error_status
from broker.grpc.group_commit import GroupCommit
from broker.grpc.telemetry import TelemetryRegistry
from broker.lookups import topic_by_name
from broker.models import Topic
from broker.plumbing.service_threads import Workers
from broker.rules.topics import is_system_topic
from broker.services.access.callers import Caller

R = TypeVar("R")


def answered(
    response: Callable[..., R],
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Wrap a unary handler: any error it raises becomes ``response(status=<its status>)``."""

    def wrap(handler: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(handler)
        async def answered(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
            try:
                return await handler(self, request, context)
            except Exception as exc:
                return response(status=error_status(exc, call=handler.__name__))

        return answered

    return wrap


def consumer_check(caller: Caller, group: str) -> None:
    """Raises Forbidden unless the caller may consume for ``group``."""
    if not caller.may_consume(group):
        raise Forbidden(
            f"This access key may not consume for consumer group {group}.",
            details={"consumer_group": group},
        )


def route_topic(name: str) -> Topic:
    """The user topic ``name`` a route or an assignment is asked for.

    Raises:
        Forbidden: ``system_topic``. NotFound: ``topic_not_found``.
    """
    if is_system_topic(name):
        raise Forbidden(f"The system topic {name} has no route.", code="system_topic")
    topic = topic_by_name(name)
    if topic is None or topic.system:
        raise not_found("topic", name)
    return topic


class CallsBase:
    """The state every call family reads (set by ``MessagingService.__init__``) and the way a
    call runs."""

    endpoint: str
    endpoints: pb.Endpoints
    workers: Workers
    registry: TelemetryRegistry
    half_messages: GroupCommit
    ends: GroupCommit
    _published: set[tuple[str, str, str]]
    _tasks: set[asyncio.Task[Any]]

    async def _call(
        self,
        context: grpc.aio.ServicerContext,
        work: Callable[[Caller, CallMetadata], R],
        *namespaces: str,
    ) -> R:
        """Authenticate the call and run ``work(caller, metadata)``, both in one worker thread.

        Raises:
            Unauthorized, InvalidInput (``namespace_not_served``), or ``work``'s errors.
        """
        metadata = call_metadata(context)
        namespace_check(metadata.namespace, *namespaces)

        def run() -> R:
            return work(caller_authenticate(metadata), metadata)

        return await self.workers.run(run)

    def _spawn(self, coroutine: Awaitable[Any]) -> None:
        """Run ``coroutine`` on its own (a write after a stream ended); ``drain`` waits for it."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the writes ``_spawn`` started (at shutdown)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

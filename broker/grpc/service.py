"""RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` served from Halfmoon's services (the
RocketMQ proxy's ``grpc/v2`` activities): thin handlers that read the request, run one service
call (with the caller's authentication) in a worker thread, and answer its result or its error
as a ``Status`` (``broker.grpc.convert.error_status``). A call's failure is always an answer
with a status, never a gRPC error, as the clients expect.

The calls Halfmoon does not serve (PullMessage, UpdateOffset, GetOffset, QueryOffset,
RecallMessage, SyncLiteSubscription) answer gRPC UNIMPLEMENTED with a message saying so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker.constants import (
    RECEIVE_INVISIBLE_DURATION_MS,
    RECEIVE_MAX_MESSAGES,
    RECEIVE_WAIT_MS,
)
from broker.errors import Forbidden, InvalidInput, not_found
from broker.grpc.auth import CallMetadata, call_metadata, caller_authenticate, namespace_check
from broker.grpc.convert import (
    OK,
    Code,
    Outgoing,
    client_kind,
    duration_ms,
    endpoints_of,
    error_status,
    language_name,
    message_proto,
    outgoing_of,
    status,
    timestamp_ms,
)
from broker.grpc.group_commit import GroupCommit
from broker.grpc.telemetry import TelemetryRegistry, TelemetryStream, settings_answer
from broker.grpc.threads import Workers
from broker.lookups import consumer_group_by_name, topic_by_name
from broker.models import ClientConnection, Message, Topic, now_ms
from broker.plumbing.polling import PollContinuation, poll_continue
from broker.plumbing.telemetry_bus import telemetry_server_id
from broker.plumbing.wakeup_listeners import wakeup_hub
from broker.plumbing.wakeups import topic_channel
from broker.rules.topics import is_system_topic
from broker.services.access.callers import Caller
from broker.services.commitlog.batch import transaction_end_batch, transaction_prepare_batch
from broker.services.commitlog.messages import message_send, msg_id_validate
from broker.services.consumption.deliveries import delivery_dead_letter, delivery_invisible_change
from broker.services.consumption.receive import Received, messages_ack, messages_receive
from broker.services.topology import clients

logger = logging.getLogger("halfmoon.grpc")

R = TypeVar("R")

BROKER_NAME = "halfmoon"
"""The broker name of every message queue in a route (one broker, id 0: the master)."""
ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.TRANSACTION)
"""The message types every topic accepts (FIFO and DELAY messages are not served)."""
RECEIVE_DEADLINE_MARGIN_MS = 1000
"""How long before the client's deadline a receive answers (its long polling shortened)."""
RECEIVE_INVISIBLE_DEFAULT_MS = 60_000
"""The invisible duration of a receive naming none (a PushConsumer's, ``auto_renew``): the
proxy's ``defaultInvisibleTimeMills``."""
RECEIVE_LONG_POLLING_DEFAULT_MS = 20_000
"""The long polling of a receive naming none."""
PUBLISHED_REMEMBERED = 100_000
"""(client, producer group, topic) triples a process remembers as recorded on the client's row."""

_RESOLUTIONS = {
    pb.TransactionResolution.COMMIT: "commit",
    pb.TransactionResolution.ROLLBACK: "rollback",
    pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED: "unknown",
}


def _answered(
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


def _consumer_check(caller: Caller, group: str) -> None:
    """Raises Forbidden unless the caller may consume for ``group``."""
    if not caller.may_consume(group):
        raise Forbidden(
            f"This access key may not consume for consumer group {group}.",
            details={"consumer_group": group},
        )


def _route_topic(name: str) -> Topic:
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


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
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

    # --- helpers ------------------------------------------------------------------------------

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

    def _queues(
        self, topic: Topic, permission: int = pb.Permission.READ_WRITE
    ) -> list[pb.MessageQueue]:
        """One ``MessageQueue`` per queue of ``topic`` (ids from 0), on this server's endpoint."""
        broker = pb.Broker(name=BROKER_NAME, id=0, endpoints=self.endpoints)
        return [
            pb.MessageQueue(
                topic=pb.Resource(name=topic.name),
                id=queue_id,
                permission=permission,
                broker=broker,
                accept_message_types=ACCEPTED_TYPES,
            )
            for queue_id in range(topic.queue_nums)
        ]

    def _spawn(self, coroutine: Awaitable[Any]) -> None:
        """Run ``coroutine`` on its own (a write after a stream ended); ``drain`` waits for it."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the writes ``_spawn`` started (at shutdown)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- route and clients --------------------------------------------------------------------

    @_answered(spb.QueryRouteResponse)
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        """The route of a topic: every queue of it on this server (RocketMQ proxy
        ``RouteActivity.queryRoute``). TOPIC_NOT_FOUND for an unknown topic, FORBIDDEN for a
        system topic."""
        topic = await self._call(
            context,
            lambda caller, m: _route_topic(request.topic.name),
            request.topic.resource_namespace,
        )
        return spb.QueryRouteResponse(status=OK, message_queues=self._queues(topic))

    @_answered(spb.QueryAssignmentResponse)
    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        """A PushConsumer's queues: every queue of the topic (Halfmoon's receive takes from all
        of them), READ (RocketMQ proxy ``RouteActivity.queryAssignment``)."""

        def work(caller: Caller, metadata: CallMetadata) -> Topic:
            _consumer_check(caller, request.group.name)
            if consumer_group_by_name(request.group.name) is None:
                raise not_found("consumer_group", request.group.name)
            return _route_topic(request.topic.name)

        topic = await self._call(
            context, work, request.topic.resource_namespace, request.group.resource_namespace
        )
        queues = self._queues(topic, pb.Permission.READ)
        return spb.QueryAssignmentResponse(
            status=OK, assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    @_answered(spb.HeartbeatResponse)
    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> spb.HeartbeatResponse:
        """A client's heartbeat (every 10 s): its ``ClientConnection`` stays live."""

        def work(caller: Caller, metadata: CallMetadata) -> None:
            if not metadata.client_id:
                return
            clients.client_heartbeat(
                client_id=metadata.client_id,
                kind=client_kind(request.client_type),
                consumer_group=request.group.name,
                language=metadata.language,
                version=metadata.version,
                host=metadata.host,
                access_key=caller.name,
            )

        await self._call(context, work, request.group.resource_namespace)
        return spb.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        """A client shutting down: its row is disconnected. Always answered OK when the caller
        is authenticated (Node's ``shutdown()`` fails on a gRPC error), never a gRPC error."""

        def work(caller: Caller, metadata: CallMetadata) -> None:
            if metadata.client_id:
                clients.client_disconnect(client_id=metadata.client_id)

        try:
            await self._call(context, work)
        except Exception as exc:
            return spb.NotifyClientTerminationResponse(
                status=error_status(exc, call="NotifyClientTermination")
            )
        return spb.NotifyClientTerminationResponse(status=OK)

    # --- producers ----------------------------------------------------------------------------

    @_answered(spb.SendMessageResponse)
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        """Store each message of the request: NORMAL through ``message_send``, TRANSACTION (a
        half message) through ``transaction_prepare_batch`` with the half messages arriving
        beside it (``broker.grpc.group_commit``) as the caller's producer group
        (``clients.grpc_producer_group_resolve``), both keeping the client's message id and
        idempotent by it (the client resends a failed send with the same id). One entry per
        message; the top-level status is the first failed entry's, else OK."""
        if not request.messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "No message to send."))
        metadata = call_metadata(context)
        namespace_check(metadata.namespace, *(m.topic.resource_namespace for m in request.messages))
        entries = await asyncio.gather(*(self._send(m, metadata) for m in request.messages))
        failed = next((e.status for e in entries if e.status.code != Code.OK), None)
        return spb.SendMessageResponse(status=failed or OK, entries=entries)

    async def _send(self, message: pb.Message, metadata: CallMetadata) -> spb.SendResultEntry:
        """One message of a SendMessage: its entry, its error as the entry's status."""
        try:
            out = outgoing_of(message)
            if not out.msg_id.strip():
                raise InvalidInput("The message id is blank.", code="invalid_msg_id")
            msg_id_validate(out.msg_id)
            if out.message_type == pb.MessageType.TRANSACTION:
                tx, _ = await self.half_messages.run(
                    functools.partial(self._half_message_item, out, metadata)
                )
                return spb.SendResultEntry(
                    status=OK,
                    message_id=tx.transaction_id,
                    transaction_id=tx.transaction_id,
                    offset=tx.half_queue_offset or 0,
                )
            if out.message_type not in (
                pb.MessageType.NORMAL,
                pb.MessageType.MESSAGE_TYPE_UNSPECIFIED,
            ):
                raise InvalidInput(
                    f"Halfmoon serves NORMAL and TRANSACTION messages, not "
                    f"{pb.MessageType.Name(out.message_type)}.",
                    code="message_type_not_served",
                )

            def work() -> Message:
                caller = caller_authenticate(metadata)
                group = clients.grpc_sender_group(caller=caller, topic=out.topic)
                return message_send(**out.send_arguments(), producer_group=group)

            stored = await self.workers.run(work)
            return spb.SendResultEntry(
                status=OK, message_id=stored.msg_id, offset=stored.queue_offset
            )
        except Exception as exc:
            return spb.SendResultEntry(status=error_status(exc, call="SendMessage"))

    def _half_message_item(self, out: Outgoing, metadata: CallMetadata) -> dict[str, Any]:
        """In a worker thread: ``transaction_prepare``'s arguments for a half message sent by
        the caller of ``metadata``, recording that its client publishes the topic.

        Raises:
            Unauthorized; Forbidden, NotFound (``grpc_producer_group_resolve``).
        """
        caller = caller_authenticate(metadata)
        group = clients.grpc_producer_group_resolve(caller=caller, topic=out.topic)
        self._published_note(metadata.client_id, group, out.topic)
        return {
            "producer_group": group,
            **out.send_arguments(),
            "check_immunity_seconds": out.check_immunity_seconds,
            "producer_client_id": metadata.client_id,
        }

    def _published_note(self, client_id: str, group: str, topic: str) -> None:
        """Record once per process that ``client_id`` sends half messages as ``group`` to
        ``topic`` (``clients.client_publishing_add``), so its back-checks find it."""
        if not client_id or (client_id, group, topic) in self._published:
            return
        clients.client_publishing_add(client_id=client_id, producer_group=group, topic=topic)
        if len(self._published) >= PUBLISHED_REMEMBERED:
            self._published.clear()
        self._published.add((client_id, group, topic))

    @_answered(spb.EndTransactionResponse)
    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> spb.EndTransactionResponse:
        """Commit, roll back or leave unknown (TRANSACTION_RESOLUTION_UNSPECIFIED, nothing
        changes) a transaction, through ``transaction_end_batch`` with the ends arriving beside
        it (``broker.grpc.group_commit``), as the caller's producer group for the topic;
        ``SOURCE_SERVER_CHECK`` answers a back-check. The same end again is OK; the other
        action after an end is PRECONDITION_FAILED; a blank transaction id
        INVALID_TRANSACTION_ID; an unknown one NOT_FOUND."""
        transaction_id = request.transaction_id.strip()
        if not transaction_id:
            return spb.EndTransactionResponse(
                status=status(Code.INVALID_TRANSACTION_ID, "The transaction id is blank.")
            )
        action = _RESOLUTIONS.get(request.resolution)
        if action is None:
            return spb.EndTransactionResponse(
                status=status(Code.BAD_REQUEST, f"Unknown resolution {request.resolution}.")
            )

        metadata = call_metadata(context)
        namespace_check(metadata.namespace, request.topic.resource_namespace)

        def item() -> dict[str, Any]:
            caller = caller_authenticate(metadata)
            return {
                "transaction_id": transaction_id,
                "producer_group": clients.grpc_producer_group_of(
                    caller=caller, topic=request.topic.name
                ),
                "action": action,
                "from_transaction_check": (
                    request.source == pb.TransactionSource.SOURCE_SERVER_CHECK
                ),
                "remark": (
                    f"gRPC client {metadata.client_id}" if metadata.client_id else "gRPC client"
                ),
            }

        await self.ends.run(item)
        return spb.EndTransactionResponse(status=OK)

    # --- consumers ----------------------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """Long-poll for messages of a topic for a consumer group (RocketMQ proxy
        ``ReceiveMessageActivity``), as the HTTP receive does: the first read in a worker
        thread, then, while nothing is found, a read after each wake-up of the topic (a commit,
        a send, or the 5 s re-check), until ``long_polling_timeout`` (at most 30 s, and ending
        ``RECEIVE_DEADLINE_MARGIN_MS`` before the client's deadline). Streams a status (OK, or
        MESSAGE_NOT_FOUND when nothing came), then the messages and a ``delivery_timestamp``,
        then ends."""
        started = time.monotonic()
        try:
            topic = request.message_queue.topic.name
            group = request.group.name
            expression = request.filter_expression
            if expression.type == pb.FilterType.SQL or expression.expression.strip() not in (
                "",
                "*",
            ):
                yield spb.ReceiveMessageResponse(
                    status=status(
                        Code.ILLEGAL_FILTER_EXPRESSION,
                        "Halfmoon delivers every message of a topic: subscribe with the "
                        "filter expression '*'.",
                    )
                )
                return
            batch = min(
                max(request.batch_size or RECEIVE_MAX_MESSAGES[1], 1), RECEIVE_MAX_MESSAGES[1]
            )
            invisible_ms = (
                duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration")
                else RECEIVE_INVISIBLE_DEFAULT_MS
            )
            low, high = RECEIVE_INVISIBLE_DURATION_MS
            if not low <= invisible_ms <= high:
                yield spb.ReceiveMessageResponse(
                    status=status(
                        Code.ILLEGAL_INVISIBLE_TIME,
                        f"The invisible duration must be between {low} and {high} ms.",
                    )
                )
                return
            wait_ms = (
                duration_ms(request.long_polling_timeout)
                if request.HasField("long_polling_timeout")
                else RECEIVE_LONG_POLLING_DEFAULT_MS
            )
            wait_ms = min(max(wait_ms, RECEIVE_WAIT_MS[0]), RECEIVE_WAIT_MS[1])
            remaining = context.time_remaining()
            if remaining is not None:
                wait_ms = max(0, min(wait_ms, int(remaining * 1000) - RECEIVE_DEADLINE_MARGIN_MS))

            def fetch() -> list[Received]:
                return messages_receive(
                    consumer_group=group,
                    topic=topic,
                    max_messages=batch,
                    invisible_duration_ms=invisible_ms,
                )

            def first(caller: Caller, metadata: CallMetadata) -> list[Received]:
                _consumer_check(caller, group)
                return fetch()

            hub = wakeup_hub()
            channel = topic_channel(topic)
            generation = hub.generation(channel)
            found = await self._call(
                context,
                first,
                request.group.resource_namespace,
                request.message_queue.topic.resource_namespace,
            )
            deadline = started + wait_ms / 1000
            if not found and time.monotonic() < deadline:
                continuation = PollContinuation(
                    retry=lambda: fetch() or None,
                    channel=channel,
                    deadline=deadline,
                    generation=generation,
                    key=group,
                )
                found = await poll_continue(continuation, hub, self.workers.run) or []
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=error_status(exc, call="ReceiveMessage"))
            return
        if not found:
            yield spb.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "No new message.")
            )
            return
        yield spb.ReceiveMessageResponse(status=OK)
        for received in found:
            yield spb.ReceiveMessageResponse(
                message=message_proto(
                    received.message,
                    receipt_handle=received.receipt_handle,
                    delivery_attempt=received.delivery_attempt,
                    invisible_duration_ms=invisible_ms,
                )
            )
        # When the messages left the broker (the Python PushConsumer's receive latency needs it).
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp_ms(now_ms()))

    @_answered(spb.AckMessageResponse)
    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        """Ack received messages by receipt handle (``messages_ack``). An entry whose handle is
        unknown, acked or superseded is INVALID_RECEIPT_HANDLE, and so is the top-level status
        then (Node reads only that)."""
        group = request.group.name

        def work(caller: Caller, metadata: CallMetadata) -> tuple[int, list[dict[str, str]]]:
            _consumer_check(caller, group)
            return messages_ack(
                consumer_group=group, receipt_handles=[e.receipt_handle for e in request.entries]
            )

        _, failed = await self._call(
            context, work, request.group.resource_namespace, request.topic.resource_namespace
        )
        bad = {f["receipt_handle"] for f in failed}
        invalid = status(
            Code.INVALID_RECEIPT_HANDLE,
            "The receipt handle is unknown, acked, or was superseded by a redelivery.",
        )
        entries = [
            spb.AckMessageResultEntry(
                message_id=e.message_id,
                receipt_handle=e.receipt_handle,
                status=invalid if e.receipt_handle in bad else OK,
            )
            for e in request.entries
        ]
        top = OK
        if bad:
            top = status(
                Code.INVALID_RECEIPT_HANDLE,
                f"{len(bad)} of {len(request.entries)} receipt handles are unknown, acked, or "
                "were superseded by a redelivery.",
            )
        return spb.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        """Make a received message invisible for a new duration from now, under a new receipt
        handle, which the answer carries (``delivery_invisible_change``). On an error the
        request's handle is echoed: the Python client takes the answer's handle whatever the
        status."""
        group = request.group.name

        def work(caller: Caller, metadata: CallMetadata) -> str:
            _consumer_check(caller, group)
            changed = delivery_invisible_change(
                consumer_group=group,
                receipt_handle=request.receipt_handle,
                invisible_duration_ms=duration_ms(request.invisible_duration),
            )
            return changed.receipt_handle

        try:
            handle = await self._call(
                context, work, request.group.resource_namespace, request.topic.resource_namespace
            )
        except Exception as exc:
            return spb.ChangeInvisibleDurationResponse(
                status=error_status(exc, call="ChangeInvisibleDuration"),
                receipt_handle=request.receipt_handle,
            )
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    @_answered(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """Move a received message to its group's dead-letter topic now
        (``delivery_dead_letter``)."""
        group = request.group.name

        def work(caller: Caller, metadata: CallMetadata) -> None:
            _consumer_check(caller, group)
            delivery_dead_letter(consumer_group=group, receipt_handle=request.receipt_handle)

        await self._call(
            context, work, request.group.resource_namespace, request.topic.resource_namespace
        )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # --- telemetry ----------------------------------------------------------------------------

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """A client's telemetry stream: each ``settings`` it writes is recorded
        (``clients.client_settings_record``, naming this process as the stream's holder) and
        answered (``broker.grpc.telemetry.settings_answer``); back-checks for the client are
        written on it while it lasts; when it ends, the client is disconnected unless it holds
        another stream here. A refused caller gets one command with the refusing status."""
        metadata = call_metadata(context)
        try:
            if not metadata.client_id:
                yield spb.TelemetryCommand(
                    status=status(Code.CLIENT_ID_REQUIRED, "The header x-mq-client-id is missing.")
                )
                return
            namespace_check(metadata.namespace)
            caller = await self.workers.run(caller_authenticate, metadata)
        except Exception as exc:
            yield spb.TelemetryCommand(status=error_status(exc, call="Telemetry"))
            return
        stream = TelemetryStream(metadata.client_id)
        registered: list[bool] = []
        reader = asyncio.ensure_future(
            self._telemetry_read(request_iterator, stream, caller, metadata, registered)
        )
        try:
            while True:
                command = await stream.outbox.get()
                if command is None:
                    break
                yield command
        finally:
            reader.cancel()
            if registered:
                logger.info("telemetry stream of client %s closed", metadata.client_id)
            if registered and self.registry.unregister(stream):
                self._spawn(
                    self.workers.run(
                        clients.client_disconnect,
                        client_id=metadata.client_id,
                        server=telemetry_server_id(),
                    )
                )

    async def _telemetry_read(
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        stream: TelemetryStream,
        caller: Caller,
        metadata: CallMetadata,
        registered: list[bool],
    ) -> None:
        """Read the client's side of a telemetry stream until it ends: settings are recorded
        and answered; the rest (thread stack traces, verify results) is ignored."""
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") != "settings":
                    continue
                try:
                    answer = await self.workers.run(
                        self._settings_record, command.settings, caller, metadata
                    )
                except Exception as exc:
                    answer = spb.TelemetryCommand(status=error_status(exc, call="Telemetry"))
                if answer.status.code == Code.OK and not registered:
                    self.registry.register(stream)
                    registered.append(True)
                    logger.info(
                        "telemetry stream of client %s (%s) opened from %s",
                        metadata.client_id,
                        pb.ClientType.Name(command.settings.client_type),
                        metadata.host,
                    )
                elif answer.status.code != Code.OK:
                    logger.info(
                        "telemetry settings of client %s refused: %s",
                        metadata.client_id,
                        answer.status.message,
                    )
                stream.put(answer)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        except Exception:
            logger.exception("telemetry stream of client %s failed", metadata.client_id)
        finally:
            stream.end()

    def _settings_record(
        self, settings: pb.Settings, caller: Caller, metadata: CallMetadata
    ) -> spb.TelemetryCommand:
        """Record a client's settings and build their answer (in a worker thread).

        Raises:
            NotFound: ``consumer_group_not_found``. Forbidden: a consumer group the caller may
                not consume for. InvalidInput: ``namespace_not_served``.
        """
        kind = client_kind(settings.client_type)
        max_attempts = None
        producer_groups: list[str] = []
        consumer_group = ""
        if kind == ClientConnection.Kind.PRODUCER:
            namespace_check(*(t.resource_namespace for t in settings.publishing.topics))
            topics = [t.name for t in settings.publishing.topics]
            producer_groups = [
                g
                for g in clients.client_producer_groups(caller=caller, topics=topics)
                if caller.may_produce(g)
            ]
        else:
            namespace_check(settings.subscription.group.resource_namespace)
            topics = [s.topic.name for s in settings.subscription.subscriptions]
            consumer_group = settings.subscription.group.name
            if consumer_group:
                _consumer_check(caller, consumer_group)
                group = consumer_group_by_name(consumer_group)
                if group is None:
                    raise not_found("consumer_group", consumer_group)
                max_attempts = group.max_delivery_attempts
        clients.client_settings_record(
            client_id=metadata.client_id,
            kind=kind,
            language=language_name(settings.user_agent, metadata.language),
            version=settings.user_agent.version or metadata.version,
            host=metadata.host,
            access_key=caller.name,
            producer_groups=producer_groups,
            consumer_group=consumer_group,
            topics=topics,
            server=telemetry_server_id(),
        )
        return settings_answer(settings, max_delivery_attempts=max_attempts)

    # --- not served ---------------------------------------------------------------------------

    async def _unimplemented(self, context: grpc.aio.ServicerContext, call: str) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"Halfmoon does not serve {call}: it serves RocketMQ's transactional and normal "
            "messages to producers, SimpleConsumers and PushConsumers.",
        )

    async def PullMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "PullMessage")

    async def UpdateOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "UpdateOffset")

    async def GetOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "GetOffset")

    async def QueryOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "QueryOffset")

    async def RecallMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "RecallMessage")

    async def SyncLiteSubscription(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._unimplemented(context, "SyncLiteSubscription")

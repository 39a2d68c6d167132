"""The Telemetry call: a client's settings recorded and answered on its stream, and the
back-checks written to it (``broker.grpc.telemetry`` holds the streams)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.errors import not_found
from broker.grpc.auth import CallMetadata, call_metadata, caller_authenticate, namespace_check
from broker.grpc.calls.base import CallsBase, consumer_check
from broker.grpc.convert import Code, client_kind, error_status, filter_of, language_name, status
from broker.grpc.telemetry import TelemetryStream, settings_answer
from broker.lookups import consumer_group_by_name
from broker.models import ClientConnection
from broker.plumbing.telemetry_bus import telemetry_server_id
from broker.services.access.callers import Caller
from broker.services.consumption.subscriptions import subscriptions_record
from broker.services.topology import clients

logger = logging.getLogger("halfmoon.grpc")


class TelemetryCalls(CallsBase):
    """Telemetry."""

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
        fifo = False
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
            # Checked before anything is written: a malformed one answers
            # ILLEGAL_FILTER_EXPRESSION.
            filters = {
                s.topic.name: filter_of(s.expression) for s in settings.subscription.subscriptions
            }
            if consumer_group:
                consumer_check(caller, consumer_group)
                group = consumer_group_by_name(consumer_group)
                if group is None:
                    raise not_found("consumer_group", consumer_group)
                max_attempts = group.max_delivery_attempts
                fifo = group.fifo
                subscriptions_record(consumer_group=consumer_group, expressions=filters)
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
        return settings_answer(settings, max_delivery_attempts=max_attempts, fifo=fifo)

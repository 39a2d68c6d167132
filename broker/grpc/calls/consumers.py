"""Consumers' calls: ReceiveMessage (long polling), AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue (the RocketMQ proxy's ``ReceiveMessageActivity``,
``AckMessageActivity``, ``ChangeInvisibleDurationActivity``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.constants import (
    RECEIVE_INVISIBLE_DURATION_MS,
    RECEIVE_MAX_MESSAGES,
    RECEIVE_WAIT_MS,
)
from broker.grpc.auth import CallMetadata
from broker.grpc.calls.base import CallsBase, answered, consumer_check
from broker.grpc.convert import (
    OK,
    Code,
    duration_ms,
    error_status,
    filter_of,
    message_proto,
    status,
    timestamp_ms,
)
from broker.plumbing.polling import PollContinuation, poll_continue
from broker.plumbing.wakeup_listeners import wakeup_hub
from broker.plumbing.wakeups import topic_channel
from broker.rules.clock import now_ms
from broker.services.access.callers import Caller
from broker.services.consumption.deliveries import delivery_dead_letter, delivery_invisible_change
from broker.services.consumption.handouts import Received
from broker.services.consumption.receive import messages_ack, messages_receive

RECEIVE_DEADLINE_MARGIN_MS = 1000
"""How long before the client's deadline a receive answers (its long polling shortened)."""
RECEIVE_INVISIBLE_DEFAULT_MS = 60_000
"""The invisible duration of a receive naming none (a PushConsumer's, ``auto_renew``): the
proxy's ``defaultInvisibleTimeMills``."""
RECEIVE_LONG_POLLING_DEFAULT_MS = 20_000
"""The long polling of a receive naming none."""


class ConsumerCalls(CallsBase):
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue."""

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """Long-poll for messages of a topic for a consumer group that pass the request's
        ``filter_expression`` (TAG or SQL, applied by the broker: the clients do not filter;
        a malformed one is ILLEGAL_FILTER_EXPRESSION) (RocketMQ proxy
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
            expression = filter_of(request.filter_expression)
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
                    filter_expression=expression,
                )

            def first(caller: Caller, metadata: CallMetadata) -> list[Received]:
                consumer_check(caller, group)
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

    @answered(spb.AckMessageResponse)
    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        """Ack received messages by receipt handle (``messages_ack``). An entry whose handle is
        unknown, acked or superseded is INVALID_RECEIPT_HANDLE, and so is the top-level status
        then (Node reads only that)."""
        group = request.group.name

        def work(caller: Caller, metadata: CallMetadata) -> tuple[int, list[dict[str, str]]]:
            consumer_check(caller, group)
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
            consumer_check(caller, group)
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

    @answered(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """Move a received message to its group's dead-letter topic now
        (``delivery_dead_letter``)."""
        group = request.group.name

        def work(caller: Caller, metadata: CallMetadata) -> None:
            consumer_check(caller, group)
            delivery_dead_letter(consumer_group=group, receipt_handle=request.receipt_handle)

        await self._call(
            context, work, request.group.resource_namespace, request.topic.resource_namespace
        )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

"""Producers' calls: SendMessage (normal, FIFO, delay and half messages) and EndTransaction (the
RocketMQ proxy's ``SendMessageActivity`` and ``EndTransactionActivity``).

RecallMessage, which takes a delay message back, is ``broker.grpc.calls.recall``'s."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.errors import InvalidInput
from broker.grpc.auth import CallMetadata, call_metadata, caller_authenticate, namespace_check
from broker.grpc.calls.base import CallsBase, answered
from broker.grpc.convert import OK, Code, Outgoing, error_status, outgoing_of, status
from broker.models import Message
from broker.rules.timers import recall_handle_of
from broker.selectors.messages import message_at
from broker.services.commitlog.messages import (
    message_group_check,
    message_send,
    msg_id_validate,
)
from broker.services.timers.schedule import message_send_at
from broker.services.topology import clients

PUBLISHED_REMEMBERED = 100_000
"""(client, producer group, topic) triples a process remembers as recorded on the client's row."""

_TIMELESS_TYPES = (
    pb.MessageType.NORMAL,
    pb.MessageType.MESSAGE_TYPE_UNSPECIFIED,
    pb.MessageType.TRANSACTION,
    pb.MessageType.FIFO,
)
"""The served types a message with a ``delivery_timestamp`` may not have (only DELAY may)."""

_RESOLUTIONS = {
    pb.TransactionResolution.COMMIT: "commit",
    pb.TransactionResolution.ROLLBACK: "rollback",
    pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED: "unknown",
}


class ProducerCalls(CallsBase):
    """SendMessage and EndTransaction."""

    @answered(spb.SendMessageResponse)
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        """Store each message of the request: NORMAL and FIFO (with its ``message_group``, in
        the group's queue) through ``message_send``, DELAY through
        ``message_send_at`` (its entry carries a recall handle while it waits), TRANSACTION (a
        half message) through ``transaction_prepare_batch`` with the half messages arriving
        beside it (``broker.grpc.group_commit``) as the caller's producer group
        (``clients.grpc_producer_group_resolve``), all keeping the client's message id and
        idempotent by it (the client resends a failed send with the same id). A DELAY message
        without ``delivery_timestamp``, or a NORMAL or TRANSACTION one with it, is
        MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (the proxy's check), and so is a message group on a
        type other than FIFO; a FIFO one without a valid group ILLEGAL_MESSAGE_GROUP; one due beyond
        ``HALFMOON_TIMER_MAX_DELAY_SEC`` ILLEGAL_DELIVERY_TIME. One entry per message; the
        top-level status is the first failed entry's, else OK. A request holding FIFO messages
        is stored in its order (one message after the other), the others concurrently."""
        if not request.messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "No message to send."))
        metadata = call_metadata(context)
        namespace_check(metadata.namespace, *(m.topic.resource_namespace for m in request.messages))
        if any(m.system_properties.message_type == pb.MessageType.FIFO for m in request.messages):
            # A batch of FIFO messages is stored in its order, one after the other.
            entries = [await self._send(m, metadata) for m in request.messages]
        else:
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
            _type_check(out)
            if out.message_type == pb.MessageType.DELAY:
                return await self.workers.run(functools.partial(self._delay_send, out, metadata))
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
                pb.MessageType.FIFO,
            ):
                raise InvalidInput(
                    f"Halfmoon serves NORMAL, FIFO, DELAY and TRANSACTION messages, not "
                    f"{pb.MessageType.Name(out.message_type)}.",
                    code="message_type_not_served",
                )

            def work() -> Message:
                caller = caller_authenticate(metadata)
                group = clients.grpc_sender_group(caller=caller, topic=out.topic)
                return message_send(
                    **out.send_arguments(), message_group=out.message_group, producer_group=group
                )

            stored = await self.workers.run(work)
            return spb.SendResultEntry(
                status=OK, message_id=stored.msg_id, offset=stored.queue_offset
            )
        except Exception as exc:
            return spb.SendResultEntry(status=error_status(exc, call="SendMessage"))

    def _delay_send(self, out: Outgoing, metadata: CallMetadata) -> spb.SendResultEntry:
        """In a worker thread: store the DELAY message ``out`` as the caller's sender group
        (``clients.grpc_sender_group``, as a NORMAL one) through ``message_send_at``; its
        entry: a message due now or past is a normal one (no recall handle), a waiting one
        answers its offset on ``RMQ_SYS_WHEEL_TIMER`` and its recall handle (RocketMQ
        ``HandleV1``: topic, broker name, due time, message id).

        Raises:
            Unauthorized; InvalidInput (``illegal_delivery_time``); ``message_send``'s errors.
        """
        assert out.delivery_timestamp is not None  # _type_check
        caller = caller_authenticate(metadata)
        group = clients.grpc_sender_group(caller=caller, topic=out.topic)
        stored = message_send_at(
            delivery_timestamp=out.delivery_timestamp,
            **out.send_arguments(),
            producer_group=group,
        )
        if isinstance(stored, Message):
            return spb.SendResultEntry(
                status=OK, message_id=stored.msg_id, offset=stored.queue_offset
            )
        waiting = message_at(stored.commit_log_offset)
        handle = recall_handle_of(
            topic=stored.topic, delivery_timestamp=stored.delivery_timestamp, msg_id=stored.msg_id
        )
        return spb.SendResultEntry(
            status=OK,
            message_id=stored.msg_id,
            offset=waiting.queue_offset if waiting is not None else 0,
            recall_handle=handle,
        )

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

    @answered(spb.EndTransactionResponse)
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


def _type_check(out: Outgoing) -> None:
    """Raises InvalidInput ``message_type_conflict`` (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE) for
    a DELAY message without a delivery timestamp, a NORMAL, FIFO or TRANSACTION one with one,
    or a message group on any type but FIFO; ``illegal_message_group`` (ILLEGAL_MESSAGE_GROUP)
    for a FIFO message without a valid group (RocketMQ proxy ``SendMessageActivity``: the type
    and the properties must agree)."""
    if out.message_type == pb.MessageType.FIFO:
        message_group_check(out.message_group)
    elif out.message_group:
        raise InvalidInput(
            f"A {pb.MessageType.Name(out.message_type)} message may not have a message_group: "
            "send it as FIFO.",
            code="message_type_conflict",
        )
    if out.message_type == pb.MessageType.DELAY and out.delivery_timestamp is None:
        raise InvalidInput(
            "A DELAY message needs a delivery_timestamp.", code="message_type_conflict"
        )
    if out.message_type in _TIMELESS_TYPES and out.delivery_timestamp is not None:
        raise InvalidInput(
            f"A {pb.MessageType.Name(out.message_type)} message may not have a delivery_timestamp: send it as DELAY.",
            code="message_type_conflict",
        )

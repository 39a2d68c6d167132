"""RecallMessage (RocketMQ 5.3's proxy ``RecallMessageActivity``): a producer takes back a
delay message before it is due, naming it by the recall handle SendMessage answered."""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.grpc.auth import CallMetadata
from broker.grpc.calls.base import CallsBase, answered
from broker.grpc.convert import OK
from broker.services.access.callers import Caller
from broker.services.timers.recall import scheduled_message_recall_by_handle


class RecallCalls(CallsBase):
    """RecallMessage."""

    @answered(spb.RecallMessageResponse)
    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.RecallMessageResponse:
        """Recall the delay message the request's ``recall_handle`` names (it must name the
        request's topic), as ``grpc:<client id>``: it is never delivered. Recalling it again is
        OK. BAD_REQUEST for a handle that is not one (or of another topic), NOT_FOUND for an
        unknown message, PRECONDITION_FAILED once it is due or delivered, FORBIDDEN for a
        caller that may not act for its producer group
        (``broker.services.timers.recall.scheduled_message_recall_check``)."""
        topic = request.topic.name

        def work(caller: Caller, metadata: CallMetadata) -> str:
            row = scheduled_message_recall_by_handle(
                caller=caller,
                topic=topic,
                recall_handle=request.recall_handle,
                recalled_by=f"grpc:{metadata.client_id}" if metadata.client_id else "grpc",
            )
            return row.msg_id

        msg_id = await self._call(context, work, request.topic.resource_namespace)
        return spb.RecallMessageResponse(status=OK, message_id=msg_id)

"""api-v1 additions: the message search (``GET /api/v1/message-search``) and a message's
standing with each consumer group (``GET /api/v1/messages/{msg_id}/deliveries``), the console's
``/console/messages/`` in JSON. Reads through ``broker.selectors.message_search``; an admin key
sees every message, a producer key those its producer groups sent (as ``GET
/api/v1/messages``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import require_any_producer
from broker.api.serializers.message_search import (
    MessageDeliveriesOutSerializer,
    MessageSearchOutSerializer,
    MessageSearchQuerySerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.rules.clock import now_ms
from broker.selectors.message_search import (
    MessageQuery,
    message_deliveries,
    message_search_page,
)
from broker.selectors.messages import message_get


class MessageSearchView(APIView):
    @extend_schema(
        parameters=[MessageSearchQuerySerializer],
        responses={200: MessageSearchOutSerializer, **error_responses()},
        summary="Search every stored message (addition to api-v1)",
        description=(
            "Every message the database holds (normal, half, Op, committed, retry, dead-letter "
            "and discarded ones), newest first (store time, then commit log offset), `limit` "
            "a page (default 50, at most 200): by `topic`, `tag`, `key` (one of its keys), "
            "`msg_id` (a transactional message's is its transaction id), and the store time "
            "range `[start, end)` (ms). `next_before` / `previous_after` page on (null at "
            "either end). `scheduled_state` (SCHEDULED, DELIVERED, RECALLED) finds delay and "
            "timer messages as sent, by what became of them, and `due_start` / `due_end` by "
            "their due time `[due_start, due_end)` (ms); with either, `topic` is the topic "
            "they are for. `message_group` finds the FIFO messages of a message group. "
            "`scheduled` says it of a delay "
            "message as sent (`kind` `scheduled`) or of the copy the timer delivered. When "
            "the search reaches before what the database keeps (pruned once "
            "archived), `archive` names the archive segments that hold that time. An admin key "
            "sees every message, a producer key those its producer groups sent. Two rules "
            "across parameters, which OpenAPI cannot state: at most one of `before` and "
            "`after`, `end` after `start` and `due_end` after `due_start`; 400 "
            "`invalid_input` otherwise."
        ),
    )
    def get(self, request: Request) -> Response:
        require_any_producer(request)
        q = validated(MessageSearchQuerySerializer, request.query_params)
        scope = request.user.producer_scope()
        query = MessageQuery(
            topic=q.get("topic", ""),
            key=q.get("key", ""),
            tag=q.get("tag", ""),
            msg_id=q.get("msg_id", ""),
            start_ms=q.get("start"),
            end_ms=q.get("end"),
            scheduled_state=q.get("scheduled_state", ""),
            due_start_ms=q.get("due_start"),
            due_end_ms=q.get("due_end"),
            message_group=q.get("message_group", ""),
            producer_groups=None if scope is None else frozenset(scope),
        )
        page = message_search_page(
            query, before=q.get("before"), after=q.get("after"), per_page=q["limit"]
        )
        body = {
            "messages": page.messages,
            "next_before": page.next_before.encode() if page.next_before else None,
            "previous_after": page.previous_after.encode() if page.previous_after else None,
            "archive": page.archive,
        }
        return Response(
            MessageSearchOutSerializer(body, context={"scheduled": page.scheduled}).data
        )


class MessageDeliveriesView(APIView):
    @extend_schema(
        responses={200: MessageDeliveriesOutSerializer, **error_responses(404)},
        summary="Where a message stands with each consumer group (addition to api-v1)",
        description=(
            "The message `GET /api/v1/messages/{msg_id}` answers (the delivered copy on its "
            "topic when there is one), and for every consumer group that consumes its topic or "
            "has received it: `state` (`acked`, `dead_lettered`, `in_flight`, `redelivery_due`, "
            "`waiting`: not received yet, `passed`: behind the group's offset and never "
            "received), how many times it was handed out, and when. 404 `message_not_found`."
        ),
    )
    def get(self, request: Request, msg_id: str) -> Response:
        require_any_producer(request)
        message = message_get(msg_id, producer_groups=request.user.producer_scope())
        body = {
            "msg_id": message.msg_id,
            "commit_log_offset": message.commit_log_offset,
            "topic": message.topic,
            "queue_id": message.queue_id,
            "queue_offset": message.queue_offset,
            "deliveries": message_deliveries(message, now=now_ms()),
        }
        return Response(MessageDeliveriesOutSerializer(body).data)

"""The two long-polling api-v1 endpoints, as async Django views: receive and check-requests.

DRF's ``APIView`` has no async handlers, so each endpoint is a DRF view (``ReceiveView``,
``CheckRequestsView``) that authenticates, checks rights and validates as every other view and
answers a ``LongPollResponse`` naming what to read and how long to wait; ``long_poll_view``
wraps it in an async view that then does the waiting (``broker.services.polling``); ``LongPollAPIView.as_view`` does the wrapping:

- under ASGI (uvicorn): the DRF view runs in a worker thread, then ``poll_until_async`` reads
  in worker threads and awaits wake-ups in between, holding no thread while it waits;
- under WSGI (the tests' client, gunicorn): all of it runs in the request's thread
  (``poll_until``), as Django runs an async view there through ``async_to_sync``.

Statuses, bodies, error bodies and authentication are the DRF views' own: an error raised by a
read during the wait goes through the same view's ``handle_exception``. The wrapper carries
the DRF view's ``cls`` and ``initkwargs`` so the OpenAPI document still sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import connection
from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker import selectors
from broker.api import serializers as s
from broker.api.permissions import require_consumer, require_producer
from broker.api.shapes import validated
from broker.api.views import _errors
from broker.services import checks, consumers
from broker.services.polling import poll_until, poll_until_async
from broker.services.wakeups import check_requests_channel, topic_channel


@dataclass(frozen=True)
class LongPoll:
    """What a long poll reads and how it answers.

    ``fetch``: one database try, returning the serialized items found (empty: nothing yet);
    ``body``: the answer's body for the items of the last try; ``wait_ms``: the longest wait
    (ms, the request's); ``channel``: its wake-up channel (``broker.services.wakeups``).
    """

    fetch: Callable[[], list[Any]]
    body: Callable[[list[Any]], dict[str, Any]]
    wait_ms: int
    channel: str


class LongPollResponse(Response):
    """A DRF view's valid answer still to be filled by the long poll: 200 with the body of
    no items until ``long_poll_view`` sets the items found."""

    def __init__(self, poll: LongPoll) -> None:
        super().__init__(poll.body([]))
        self.poll = poll


def _failed(response: Response, exc: Exception) -> HttpResponseBase:
    """The DRF view's answer to ``exc`` raised by a read of its long poll (re-raised if DRF
    does not handle it: Django's 500)."""
    context = response.renderer_context or {}
    view: APIView = context["view"]
    request: Request = context["request"]
    answer = view.handle_exception(exc)
    return view.finalize_response(request, answer, *context["args"], **context["kwargs"])


def _serve_blocking(
    sync_view: Callable[..., Any], request: HttpRequest, started: float, **kwargs: Any
) -> Any:
    response = sync_view(request, **kwargs)
    if not isinstance(response, LongPollResponse):
        return response
    poll = response.poll
    try:
        response.data = poll.body(
            poll_until(poll.fetch, wait_ms=poll.wait_ms, channel=poll.channel, started=started)
        )
    except Exception as exc:  # noqa: BLE001 - answered as the DRF view would, or re-raised
        return _failed(response, exc)
    return response


def _in_worker(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    # A worker thread of the event loop's pool: give its database connection back after.
    try:
        return function(*args, **kwargs)
    finally:
        connection.close()


async def _serve_async(
    sync_view: Callable[..., Any], request: HttpRequest, started: float, **kwargs: Any
) -> Any:
    worker = sync_to_async(_in_worker, thread_sensitive=False)
    response = await worker(sync_view, request, **kwargs)
    if not isinstance(response, LongPollResponse):
        return response
    poll = response.poll
    try:
        found = await poll_until_async(
            poll.fetch, wait_ms=poll.wait_ms, channel=poll.channel, started=started
        )
    except Exception as exc:  # noqa: BLE001 - answered as the DRF view would, or re-raised
        return await worker(_failed, response, exc)
    response.data = poll.body(found)
    return response


def long_poll_view(sync_view: Callable[..., Any]) -> Callable[..., Any]:
    """The async Django view serving ``sync_view`` (a DRF view whose handlers answer a
    ``LongPollResponse`` or any other response): see the module docstring."""

    async def view(request: HttpRequest, **kwargs: Any) -> Any:
        started = time.monotonic()  # wait_ms counts from here, queued time included
        if isinstance(request, ASGIRequest):
            return await _serve_async(sync_view, request, started, **kwargs)
        return await sync_to_async(_serve_blocking)(sync_view, request, started, **kwargs)

    for attribute in ("cls", "initkwargs", "csrf_exempt", "__name__", "__qualname__", "__doc__"):
        setattr(view, attribute, getattr(sync_view, attribute))
    view.long_poll = True  # type: ignore[attr-defined] - halfmoon.body_limit.ASGIHandler
    return view


class LongPollAPIView(APIView):
    """A DRF view whose ``as_view()`` is the async ``long_poll_view`` of DRF's own."""

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Any]:
        """DRF's view function of ``cls``, wrapped by ``long_poll_view``."""
        return long_poll_view(super().as_view(**initkwargs))


class CheckRequestsView(LongPollAPIView):
    @extend_schema(
        parameters=[s.CheckRequestsQuerySerializer],
        responses={200: s.CheckRequestsOutSerializer, **_errors(404)},
        summary="Long-poll the back-checks of a producer group without check_url",
    )
    def get(self, request: Request, name: str) -> Response:
        require_producer(request, name)
        query = validated(s.CheckRequestsQuerySerializer, request.query_params)
        selectors.producer_group_get(name)
        return LongPollResponse(
            LongPoll(
                fetch=lambda: checks.check_requests_poll(
                    producer_group=name, max_requests=query["max_requests"]
                ),
                body=lambda found: {"check_requests": found},
                wait_ms=query["wait_ms"],
                channel=check_requests_channel(name),
            )
        )


class ReceiveView(LongPollAPIView):
    @extend_schema(
        request=s.ReceiveInSerializer,
        responses={200: s.ReceiveOutSerializer, **_errors(404, 413)},
        summary="Receive messages (SimpleConsumer); long-polls up to wait_ms",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(s.ReceiveInSerializer, request.data)
        return LongPollResponse(
            LongPoll(
                fetch=lambda: (
                    s.ReceivedMessageSerializer(
                        consumers.messages_receive(
                            consumer_group=group,
                            topic=data["topic"],
                            max_messages=data["max_messages"],
                            invisible_duration_ms=data["invisible_duration_ms"],
                        ),
                        many=True,
                    ).data
                ),
                body=lambda found: {"messages": found},
                wait_ms=data["wait_ms"],
                channel=topic_channel(data["topic"]),
            )
        )

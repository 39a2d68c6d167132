"""The two long-polling api-v1 endpoints: receive and check-requests.

More: docs/design.md, "Module notes", broker/api/views/long_poll.py."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import require_consumer, require_producer
from broker.api.serializers.messages import (
    CheckRequestsOutSerializer,
    CheckRequestsQuerySerializer,
    ReceivedMessageSerializer,
    ReceiveInSerializer,
    ReceiveOutSerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.plumbing.polling import (
    ARRIVED_ENVIRON_KEY,
    CONTINUATION_ENVIRON_KEY,
    WAKEUP_HUB_ENVIRON_KEY,
    PollContinuation,
    poll_until,
    release_connection,
)
from broker.plumbing.wakeup_listeners import WakeupHub
from broker.plumbing.wakeups import check_requests_channel, topic_channel
from broker.selectors.topology import producer_group_get
from broker.services import checks
from broker.services.consumption.receive import messages_receive
from broker.services.consumption.subscriptions import MATCH_ALL, subscription_filter


@dataclass(frozen=True)
class LongPoll:
    """What a long poll reads and how it answers.

    ``fetch``: one database try, returning the serialized items found (empty: nothing yet);
    ``body``: the answer's body for the items of the last try; ``wait_ms``: the longest wait
    (ms, the request's); ``channel``: its wake-up channel (``broker.plumbing.wakeups``);
    ``key``: who competes for the same items (``PollContinuation.key``).
    """

    fetch: Callable[[], list[Any]]
    body: Callable[[list[Any]], dict[str, Any]]
    wait_ms: int
    channel: str
    key: str


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


def _serve(sync_view: Callable[..., Any], request: HttpRequest, **kwargs: Any) -> Any:
    response = sync_view(request, **kwargs)
    if not isinstance(response, LongPollResponse):
        return response
    poll = response.poll
    started = request.META.get(ARRIVED_ENVIRON_KEY, time.monotonic())
    hub = request.META.get(WAKEUP_HUB_ENVIRON_KEY)
    try:
        if hub is None:
            found = poll_until(
                poll.fetch, wait_ms=poll.wait_ms, channel=poll.channel, started=started
            )
        else:
            found = _first_read(response, hub, started, request.META)
    except Exception as exc:  # noqa: BLE001 - answered as the DRF view would, or re-raised
        return _failed(response, exc)
    response.data = poll.body(found)
    return response


def _first_read(
    response: LongPollResponse, hub: WakeupHub, started: float, environ: dict[str, Any]
) -> list[Any]:
    """The first read of a long poll the server waits for (``halfmoon.serving``): when it finds
    nothing and time remains, the rest goes into ``environ`` as a ``PollContinuation``."""
    poll = response.poll
    generation = hub.generation(poll.channel)  # before the read: see poll_continue
    found = poll.fetch()
    deadline = started + poll.wait_ms / 1000
    if not found and poll.wait_ms > 0 and time.monotonic() < deadline:
        environ[CONTINUATION_ENVIRON_KEY] = PollContinuation(
            retry=functools.partial(_retry, response),
            channel=poll.channel,
            deadline=deadline,
            generation=generation,
            key=poll.key,
        )
    return found


def _retry(response: LongPollResponse) -> HttpResponseBase | None:
    """One more read of a waiting long poll, in a server thread: its rendered answer (the items
    found, or the DRF view's answer to the read's error), or None when nothing yet. The
    database connection goes back to the pool either way."""
    poll = response.poll
    try:
        found = poll.fetch()
        if not found:
            return None
        response.data = poll.body(found)
        answer: HttpResponseBase = response
    except Exception as exc:  # noqa: BLE001 - answered as the DRF view would, or re-raised
        answer = _failed(response, exc)
    finally:
        release_connection()
    if isinstance(answer, SimpleTemplateResponse):
        answer.content = answer.rendered_content  # the first read's was rendered with no items
    return answer


def long_poll_view(sync_view: Callable[..., Any]) -> Callable[..., Any]:
    """The Django view serving ``sync_view`` (a DRF view whose handlers answer a
    ``LongPollResponse`` or any other response): see the module docstring."""

    def view(request: HttpRequest, **kwargs: Any) -> Any:
        return _serve(sync_view, request, **kwargs)

    for attribute in ("cls", "initkwargs", "csrf_exempt", "__name__", "__qualname__", "__doc__"):
        setattr(view, attribute, getattr(sync_view, attribute))
    view.long_poll = True  # type: ignore[attr-defined]
    return view


class LongPollAPIView(APIView):
    """A DRF view whose ``as_view()`` is the async ``long_poll_view`` of DRF's own."""

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Any]:
        """DRF's view function of ``cls``, wrapped by ``long_poll_view``."""
        return long_poll_view(super().as_view(**initkwargs))


class CheckRequestsView(LongPollAPIView):
    @extend_schema(
        parameters=[CheckRequestsQuerySerializer],
        responses={200: CheckRequestsOutSerializer, **error_responses(404)},
        summary="Long-poll the back-checks of a producer group without check_url",
    )
    def get(self, request: Request, name: str) -> Response:
        require_producer(request, name)
        query = validated(CheckRequestsQuerySerializer, request.query_params)
        producer_group_get(name)
        return LongPollResponse(
            LongPoll(
                fetch=lambda: checks.check_requests_poll(
                    producer_group=name, max_requests=query["max_requests"]
                ),
                body=lambda found: {"check_requests": found},
                wait_ms=query["wait_ms"],
                channel=check_requests_channel(name),
                key=name,
            )
        )


class ReceiveView(LongPollAPIView):
    @extend_schema(
        request=ReceiveInSerializer,
        responses={200: ReceiveOutSerializer, **error_responses(404, 413)},
        summary="Receive messages (SimpleConsumer); long-polls up to wait_ms",
        description="Only the messages `filter` matches are delivered (TAG, or SQL92 over the "
        'properties; docs/api.md "Filters"); the others count as consumed. A malformed '
        "SQL92 expression is 400 `illegal_filter_expression` with the 1-based `position` "
        "where it goes wrong.",
    )
    def post(self, request: Request, group: str) -> Response:
        require_consumer(request, group)
        data = validated(ReceiveInSerializer, request.data)
        expression = subscription_filter(**data["filter"]) if "filter" in data else MATCH_ALL
        return LongPollResponse(
            LongPoll(
                fetch=lambda: (
                    ReceivedMessageSerializer(
                        messages_receive(
                            consumer_group=group,
                            topic=data["topic"],
                            max_messages=data["max_messages"],
                            invisible_duration_ms=data["invisible_duration_ms"],
                            filter_expression=expression,
                        ),
                        many=True,
                    ).data
                ),
                body=lambda found: {"messages": found},
                wait_ms=data["wait_ms"],
                channel=topic_channel(data["topic"]),
                key=group,
            )
        )

"""Console pages: topics, producer groups and consumer groups, and each group's RocketMQ
clients seen over gRPC.

The lists are for viewers and up (reads through ``broker.selectors.topology`` and
``broker.selectors.clients``); creating and
editing is for admins (``ManageConsoleRequired``) and goes through the same services as the
API (``broker.services.topology.writes``). A service's ``InvalidInput`` or ``Conflict`` is shown as a
form error (status 400); an unknown or broker-owned name is a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.conf import conf
from broker.errors import NotFound
from broker.rules.message_types import TopicMessageType
from broker.selectors.check_explanations import check_explanation_of_producer_group
from broker.selectors.clients import (
    ClientCounts,
    client_connections_of_consumer_group,
    client_connections_of_producer_group,
    client_counts_by_consumer_group,
    client_counts_by_producer_group,
)
from broker.selectors.reconciliation import (
    producer_group_analytics,
    reconciliation_run_latest_or_none,
)
from broker.selectors.topology import (
    consumer_group_get,
    consumer_group_rows,
    producer_group_get,
    producer_group_rows,
    topic_rows,
    user_topic_get,
)
from broker.services.topology import writes as topology_writes
from console.forms.topology import (
    ConsumerGroupCreateForm,
    ConsumerGroupEditForm,
    ProducerGroupCreateForm,
    ProducerGroupEditForm,
    TopicCreateForm,
    TopicEditForm,
)
from console.permissions import ViewConsoleRequired
from console.views.base import ServiceFormView
from console.views.check_explanations import check_panel


class TopicListView(ViewConsoleRequired, View):
    """``/console/topics/``: user topics with each queue's min and max offsets;
    ``?system=1`` adds the broker's own topics (half, Op, discard, DLQ)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        include_system = request.GET.get("system") == "1"
        return render(
            request,
            "console/topology/topics.html",
            {"topics": topic_rows(include_system=include_system), "include_system": include_system},
        )


class ProducerGroupListView(ViewConsoleRequired, View):
    """``/console/producer-groups/``: check URL, reachability, backoff, pending counts, its
    gRPC clients (live and recently gone, linking to its connection list), and each group's
    figures from the latest successful reconciliation (``analytics``: final states, discard
    rate, worst hourly latency percentiles, time unreachable)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        run = reconciliation_run_latest_or_none()
        clients = client_counts_by_producer_group()
        context = {
            "rows": [(r, clients.get(r.group.name, ClientCounts())) for r in producer_group_rows()],
            "analytics_run": run,
            "analytics": list(producer_group_analytics(run).values()) if run else [],
        }
        return render(request, "console/topology/producer_groups.html", context)


class ConsumerGroupListView(ViewConsoleRequired, View):
    """``/console/consumer-groups/``: lag per topic, in-flight deliveries, DLQ count, its gRPC
    clients (live and recently gone, linking to its connection list)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        clients = client_counts_by_consumer_group()
        rows = [(r, clients.get(r.group.name, ClientCounts())) for r in consumer_group_rows()]
        return render(request, "console/topology/consumer_groups.html", {"rows": rows})


def _clients_page(
    request: HttpRequest,
    *,
    side: str,
    group: str,
    clients: list[Any],
    extra: dict[str, Any] | None = None,
) -> HttpResponse:
    """A group's connection list: ``side`` ``producer`` or ``consumer``, its ``clients``
    (annotated ``live``, live first) and the live window (``HALFMOON_GRPC_CLIENT_EXPIRY_MS``)."""
    context = {
        "group": group,
        "side": side,
        "clients": clients,
        "expiry_s": conf.grpc_client_expiry_ms // 1000,
        **(extra or {}),
    }
    return render(request, "console/topology/group_clients.html", context)


class ProducerGroupClientsView(ViewConsoleRequired, View):
    """``/console/producer-groups/<name>/clients/``: the group's RocketMQ clients seen over
    gRPC (rocketmq-dashboard's producer connections): live ones first, then those gone within
    the last hour. An unknown group is a 404."""

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        try:
            clients = client_connections_of_producer_group(name)
        except NotFound as error:
            raise Http404(error.message) from error
        explained = check_explanation_of_producer_group(name)
        subject = (
            f"the check of its pending transaction due first, {explained.next_transaction_id}"
            f" ({explained.pending} pending)"
            if explained.next_transaction_id
            else ""
        )
        extra = {
            "panel": check_panel(explained.explanation),
            "subject": subject,
            "api_path": f"GET /api/v1/producer-groups/{name}/check-explanation",
        }
        return _clients_page(request, side="producer", group=name, clients=clients, extra=extra)


class ConsumerGroupClientsView(ViewConsoleRequired, View):
    """``/console/consumer-groups/<name>/clients/``: the group's simple and push consumers seen
    over gRPC (rocketmq-dashboard's consumer connections), as ``ProducerGroupClientsView``."""

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        try:
            clients = client_connections_of_consumer_group(name)
        except NotFound as error:
            raise Http404(error.message) from error
        return _clients_page(request, side="consumer", group=name, clients=clients)


def _found(get: Callable[[str], Any], name: str | None) -> Any:
    """``get(name)`` (a selector's ``*_get``); its NotFound as the page's 404."""
    try:
        return get(name or "")
    except NotFound as error:
        raise Http404(error.message) from error


class TopicCreateView(ServiceFormView):
    """``/console/topics/new/`` (admin): ``topic_create`` with its consume queues."""

    form_class = TopicCreateForm
    title = "New topic"
    noun = "Topic"
    list_route = "console:topics"

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.topic_create(
            name=data["name"],
            queue_nums=data["queue_nums"],
            message_type=data.get("message_type") or TopicMessageType.MIXED,
        )


class TopicEditView(ServiceFormView):
    """``/console/topics/<name>/edit/`` (admin): more queues and the message type
    (``topic_update``); the broker's own topics are not editable (404)."""

    form_class = TopicEditForm
    title = "Edit topic"
    noun = "Topic"
    list_route = "console:topics"

    def initial(self, name: str | None) -> dict[str, Any]:
        topic = _found(user_topic_get, name)
        return {"queue_nums": topic.queue_nums, "message_type": topic.message_type}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.topic_update(
            name=name or "",
            queue_nums=data["queue_nums"],
            message_type=data.get("message_type") or None,
        )


class ProducerGroupCreateView(ServiceFormView):
    """``/console/producer-groups/new/`` (admin): ``producer_group_create``; the answer shows
    the group's ``check_secret`` this once (as the API's create does), never again."""

    form_class = ProducerGroupCreateForm
    title = "New producer group"
    noun = "Producer group"
    list_route = "console:producer_groups"

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.producer_group_create(
            name=data["name"], check_url=data["check_url"] or None
        )

    def done(self, request: HttpRequest, result: Any) -> HttpResponse:
        return render(request, "console/topology/producer_group_created.html", {"group": result})


class ProducerGroupEditView(ServiceFormView):
    """``/console/producer-groups/<name>/edit/`` (admin): its check URL
    (``producer_group_update``, which also clears its unreachability)."""

    form_class = ProducerGroupEditForm
    title = "Edit producer group"
    noun = "Producer group"
    list_route = "console:producer_groups"

    def initial(self, name: str | None) -> dict[str, Any]:
        group = _found(producer_group_get, name)
        return {"check_url": group.check_url or ""}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.producer_group_update(
            name=name or "", check_url=data["check_url"] or None
        )


class ConsumerGroupCreateView(ServiceFormView):
    """``/console/consumer-groups/new/`` (admin): ``consumer_group_create``."""

    form_class = ConsumerGroupCreateForm
    title = "New consumer group"
    noun = "Consumer group"
    list_route = "console:consumer_groups"

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.consumer_group_create(
            name=data["name"], max_delivery_attempts=data["max_delivery_attempts"]
        )


class ConsumerGroupEditView(ServiceFormView):
    """``/console/consumer-groups/<name>/edit/`` (admin): ``consumer_group_update``."""

    form_class = ConsumerGroupEditForm
    title = "Edit consumer group"
    noun = "Consumer group"
    list_route = "console:consumer_groups"

    def initial(self, name: str | None) -> dict[str, Any]:
        group = _found(consumer_group_get, name)
        return {"max_delivery_attempts": group.max_delivery_attempts}

    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        return topology_writes.consumer_group_update(
            name=name or "", max_delivery_attempts=data["max_delivery_attempts"]
        )


urlpatterns: list[URLPattern] = [
    path("topics/", TopicListView.as_view(), name="topics"),
    path("topics/new/", TopicCreateView.as_view(), name="topic_create"),
    path("topics/<str:name>/edit/", TopicEditView.as_view(), name="topic_edit"),
    path("producer-groups/", ProducerGroupListView.as_view(), name="producer_groups"),
    path("producer-groups/new/", ProducerGroupCreateView.as_view(), name="producer_group_create"),
    path(
        "producer-groups/<str:name>/edit/",
        ProducerGroupEditView.as_view(),
        name="producer_group_edit",
    ),
    path(
        "producer-groups/<str:name>/clients/",
        ProducerGroupClientsView.as_view(),
        name="producer_group_clients",
    ),
    path("consumer-groups/", ConsumerGroupListView.as_view(), name="consumer_groups"),
    path("consumer-groups/new/", ConsumerGroupCreateView.as_view(), name="consumer_group_create"),
    path(
        "consumer-groups/<str:name>/edit/",
        ConsumerGroupEditView.as_view(),
        name="consumer_group_edit",
    ),
    path(
        "consumer-groups/<str:name>/clients/",
        ConsumerGroupClientsView.as_view(),
        name="consumer_group_clients",
    ),
]

"""Console pages: the message search (every message the database holds, by topic and time, key,
tag, msg id or transaction id, what became of a delay message, in keyset pages) and one
message's page (body, properties, its transaction or its schedule, where it stands with each
consumer group). Reads only, through
``broker.selectors.message_search``; viewers and up."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.views import View

from broker.rules.clock import now_ms
from broker.rules.messages import (
    DELIVERY_STATE_TEXT,
    MESSAGE_KIND_TEXT,
    message_kind,
)
from broker.rules.preview import body_preview
from broker.rules.topics import is_undeliverable_topic
from broker.selectors.message_search import (
    MessagePage,
    MessageQuery,
    archive_note,
    message_deliveries,
    message_search_page,
    message_transaction_id,
)
from broker.selectors.messages import message_at
from broker.selectors.scheduled_messages import scheduled_of_messages
from console.forms.messages import MessageSearchForm, message_query_of
from console.permissions import ViewConsoleRequired


class MessageSearchView(ViewConsoleRequired, View):
    """``/console/messages/``: the search form and a page of results, newest first. No search
    yet: the newest messages. Invalid parameters: the page with the form's errors, 400."""

    def get(self, request: HttpRequest) -> HttpResponse:
        form = MessageSearchForm(request.GET)
        page, status = MessagePage(), 400
        if form.is_valid():
            page = message_search_page(
                message_query_of(form),
                before=form.cleaned_data["before"],
                after=form.cleaned_data["after"],
                per_page=form.cleaned_data["per_page"],
            )
            status = 200
        params = form.search_params()
        context = {
            "form": form,
            "page": page,
            "rows": [(m, MESSAGE_KIND_TEXT[k], page.scheduled.get(m.pk)) for m, k in page.kinds()],
            "searched": bool(params),
            "export_query": urlencode([("kind", "messages"), *params]),
            "older_query": urlencode([*params, ("before", page.next_before.encode())])
            if page.next_before
            else "",
            "newer_query": urlencode([*params, ("after", page.previous_after.encode())])
            if page.previous_after
            else "",
        }
        return render(request, "console/messages/list.html", context, status=status)


class MessageDetailView(ViewConsoleRequired, View):
    """``/console/messages/<commit log offset>/``: the message, its body and properties, its
    transaction, and per consumer group whether it was delivered, how often, acked or
    dead-lettered. A message the database no longer holds: 404, the page saying where pruned
    messages are (the archive's segments)."""

    def get(self, request: HttpRequest, commit_log_offset: int) -> HttpResponse:
        message = message_at(commit_log_offset)
        if message is None:
            context = {"missing": commit_log_offset, "archive": archive_note(MessageQuery())}
            return render(request, "console/messages/detail.html", context, status=404)
        now = now_ms()
        kind = message_kind(message.topic, message.prepared_transaction_offset)
        deliveries = message_deliveries(message, now=now)
        context = {
            "m": message,
            "kind": MESSAGE_KIND_TEXT[kind],
            "preview": body_preview(bytes(message.body), is_text=message.body_is_text),
            "properties": sorted((message.properties or {}).items()),
            "transaction_id": message_transaction_id(message),
            "deliveries": [(d, DELIVERY_STATE_TEXT[d.state]) for d in deliveries],
            "deliverable": not is_undeliverable_topic(message.topic),
            "scheduled": scheduled_of_messages([message.pk]).get(message.pk),
            "now": now,
        }
        return render(request, "console/messages/detail.html", context)


urlpatterns: list[URLPattern] = [
    path("messages/", MessageSearchView.as_view(), name="messages"),
    path("messages/<int:commit_log_offset>/", MessageDetailView.as_view(), name="message"),
]

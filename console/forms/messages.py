"""The message search's form (``/console/messages/``), read from the URL (GET) so a search can be
bookmarked and shared. ``message_query_of`` turns a valid form into the selector's
``broker.selectors.message_search.MessageQuery``.

URL parameters: ``topic``, ``key``, ``tag``, ``msg_id`` (a msg id or a transaction id: the
same UNIQ_KEY), ``start`` / ``end`` (UTC, ``YYYY-MM-DDTHH:MM[:SS]``: the store time range
``[start, end)``), ``scheduled_state`` (delay messages as sent, by what became of them),
``due_start`` / ``due_end`` (UTC: their due time range), ``message_group`` (FIFO); paging:
``before`` / ``after`` (a ``SearchCursor``) and ``per_page`` (1..200, default 50).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms

from broker.constants import MSG_ID_PATTERN, NAME_PATTERN
from broker.selectors.message_search import (
    SEARCH_PAGE_DEFAULT,
    SEARCH_PAGE_MAX,
    MessageQuery,
    SearchCursor,
)

SEARCH_PARAMS = (
    "topic",
    "key",
    "tag",
    "msg_id",
    "start",
    "end",
    "scheduled_state",
    "due_start",
    "due_end",
    "message_group",
)
"""The URL parameters of the search, in the order the form declares them."""

_TIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


class MessageSearchForm(forms.Form):
    """The search and its paging, from ``request.GET``. Invalid values are form errors (shown
    on the page, answered with 400), never a server error."""

    topic = forms.RegexField(regex=NAME_PATTERN, required=False, max_length=127)
    key = forms.CharField(required=False, max_length=128, strip=True)
    tag = forms.CharField(required=False, max_length=255, strip=True)
    msg_id = forms.RegexField(
        regex=MSG_ID_PATTERN, required=False, max_length=64, label="Msg id or transaction id"
    )
    start = forms.DateTimeField(
        required=False,
        input_formats=_TIME_FORMATS,
        label="Stored from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    end = forms.DateTimeField(
        required=False,
        input_formats=_TIME_FORMATS,
        label="to (UTC, excluded)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    scheduled_state = forms.ChoiceField(
        choices=[
            ("", "any message"),
            ("SCHEDULED", "scheduled, waiting"),
            ("DELIVERED", "scheduled, delivered"),
            ("RECALLED", "scheduled, recalled"),
        ],
        required=False,
        label="Delay messages",
    )
    due_start = forms.DateTimeField(
        required=False,
        input_formats=_TIME_FORMATS,
        label="Due from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    due_end = forms.DateTimeField(
        required=False,
        input_formats=_TIME_FORMATS,
        label="to (UTC, excluded)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    message_group = forms.CharField(
        required=False, max_length=64, strip=True, label="FIFO message group"
    )
    before = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)
    after = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)
    per_page = forms.IntegerField(
        required=False, min_value=1, max_value=SEARCH_PAGE_MAX, widget=forms.HiddenInput
    )

    def _clean_cursor(self, name: str) -> SearchCursor | None:
        text = self.cleaned_data.get(name) or ""
        if not text:
            return None
        try:
            return SearchCursor.decode(text)
        except ValueError:
            raise forms.ValidationError("Not a page position.", code="invalid_cursor") from None

    def clean_before(self) -> SearchCursor | None:
        return self._clean_cursor("before")

    def clean_after(self) -> SearchCursor | None:
        return self._clean_cursor("after")

    def clean_per_page(self) -> int:
        return self.cleaned_data.get("per_page") or SEARCH_PAGE_DEFAULT

    def clean(self) -> dict:
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            self.add_error("end", "The end must be after the start.")
        due_start, due_end = data.get("due_start"), data.get("due_end")
        if due_start and due_end and due_end <= due_start:
            self.add_error("due_end", "The end must be after the start.")
        return data

    def search_params(self) -> list[tuple[str, str]]:
        """The search's (name, value) pairs as given, without paging: for the page links."""
        return [(n, self.data[n]) for n in SEARCH_PARAMS if self.data.get(n, "") != ""]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def message_query_fields(form: MessageSearchForm) -> dict[str, Any]:
    """``MessageQuery``'s fields for a valid form (call ``form.is_valid()`` first): ``topic``,
    ``key``, ``tag``, ``msg_id``, ``start_ms``, ``end_ms``, ``scheduled_state``,
    ``due_start_ms``, ``due_end_ms``, ``message_group`` (JSON values: the incident export
    records them)."""
    data = form.cleaned_data
    return {
        "topic": data.get("topic") or "",
        "key": data.get("key") or "",
        "tag": data.get("tag") or "",
        "msg_id": data.get("msg_id") or "",
        "start_ms": _ms(data.get("start")),
        "end_ms": _ms(data.get("end")),
        "scheduled_state": data.get("scheduled_state") or "",
        "due_start_ms": _ms(data.get("due_start")),
        "due_end_ms": _ms(data.get("due_end")),
        "message_group": data.get("message_group") or "",
    }


def message_query_of(form: MessageSearchForm) -> MessageQuery:
    """The selector's query for a valid form; every console user may view every message, so
    no producer-group restriction."""
    return MessageQuery(**message_query_fields(form))

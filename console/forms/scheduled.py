"""The scheduled messages' filter (``/console/scheduled/``), read from the URL so a list can be
bookmarked and shared: ``topic``, ``key``, ``state`` (``SCHEDULED`` when absent: what waits;
``any`` for every state) and the due time range ``due_after`` / ``due_before`` (UTC,
``YYYY-MM-DDTHH:MM[:SS]``, ``due_before`` excluded); ``page`` a page number.
``scheduled_filters_of`` turns a valid form into ``broker.selectors.scheduled_messages.
scheduled_messages``' keyword arguments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms

from broker.constants import NAME_PATTERN
from broker.models import ScheduledMessage

FILTERS = ("topic", "key", "state", "due_after", "due_before")
"""The URL parameters of the filter, in the form's order."""

ANY_STATE = "any"
TIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


class ScheduledFilterForm(forms.Form):
    """The list's filter, from ``request.GET``; invalid values are form errors (400)."""

    topic = forms.RegexField(regex=NAME_PATTERN, required=False, max_length=127)
    key = forms.CharField(required=False, max_length=128, strip=True)
    state = forms.ChoiceField(
        choices=[
            (ScheduledMessage.State.SCHEDULED, "waiting (SCHEDULED)"),
            (ScheduledMessage.State.DELIVERED, "delivered"),
            (ScheduledMessage.State.RECALLED, "recalled"),
            (ANY_STATE, "any"),
        ],
        required=False,
    )
    due_after = forms.DateTimeField(
        required=False,
        input_formats=TIME_FORMATS,
        label="Due from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    due_before = forms.DateTimeField(
        required=False,
        input_formats=TIME_FORMATS,
        label="to (UTC, excluded)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )

    def clean_state(self) -> str:
        """The state filtered on: SCHEDULED when none is given, "" for ``any``."""
        state = self.cleaned_data.get("state") or ScheduledMessage.State.SCHEDULED
        return "" if state == ANY_STATE else state

    def filter_params(self) -> list[tuple[str, str]]:
        """The filter's (name, value) pairs as given: for the page links."""
        return [(n, self.data[n]) for n in FILTERS if self.data.get(n, "") != ""]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def scheduled_filters_of(form: ScheduledFilterForm) -> dict[str, Any]:
    """``scheduled_messages``' keyword arguments for a valid form: ``topic``, ``key``,
    ``state``, ``due_after``, ``due_before`` (ms)."""
    data = form.cleaned_data
    return {
        "topic": data.get("topic") or "",
        "key": data.get("key") or "",
        "state": data["state"],
        "due_after": _ms(data.get("due_after")),
        "due_before": _ms(data.get("due_before")),
    }

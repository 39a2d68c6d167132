"""The forms of a consumer group's operations (``console.views.consumer_groups``,
``console.views.blocked_message_groups``): the time to reset the group's offsets to, read as
UTC, and the dead-letter of a blocked message group's head."""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms

TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M")
"""``<input type="datetime-local" step="1">`` sends the first or the second."""


class OffsetResetForm(forms.Form):
    """``at``: the time (UTC) to reset to, e.g. ``2026-11-28T02:00:00``; ``topic``: one topic
    the group has offsets on, or empty for all of them."""

    at = forms.CharField(max_length=32, label="Reset to (UTC)")
    topic = forms.CharField(max_length=127, required=False)

    def clean_at(self) -> int:
        """The time in ms since the epoch."""
        text = self.cleaned_data["at"].strip()
        for fmt in TIME_FORMATS:
            try:
                parsed = datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
            return int(parsed.timestamp() * 1000)
        raise forms.ValidationError(
            "Enter a time as YYYY-MM-DDTHH:MM[:SS] (UTC).", code="invalid_time"
        )


class HeadDeadLetterForm(forms.Form):
    """The "Send head to DLQ" of a blocked message group: the message group (``topic``,
    ``message_group``), the head the operator saw (``msg_id``) and the ``reason`` (checked by
    the service: required, at most 1,024 characters)."""

    topic = forms.CharField(max_length=127)
    message_group = forms.CharField(max_length=64, strip=False)
    msg_id = forms.CharField(max_length=64)
    reason = forms.CharField(max_length=1024, required=False)

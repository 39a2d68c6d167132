"""Template filters for the broker's millisecond timestamps: ``{{ ts|iso }}`` (ISO-8601 UTC,
``broker.rules.audit.iso_utc``), ``{{ ts|ago }}`` ("3 min ago", ``broker.rules.durations``)
and ``{{ ms|duration }}`` ("2 h 5 min"). ``None`` and "" render as an empty string."""

from __future__ import annotations

from typing import Any

from django import template

from broker.rules.audit import iso_utc
from broker.rules.clock import now_ms
from broker.rules.durations import duration_text, relative_text

register = template.Library()


def _ms(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@register.filter
def iso(value: Any) -> str:
    """A timestamp (ms) as ISO-8601 UTC with milliseconds."""
    ms = _ms(value)
    return iso_utc(ms) if ms is not None else ""


@register.filter
def ago(value: Any) -> str:
    """A timestamp (ms) relative to now: ``3 min ago``, ``in 12 s``."""
    ms = _ms(value)
    return relative_text(ms, now_ms()) if ms is not None else ""


@register.filter
def duration(value: Any) -> str:
    """A span (ms) in its two largest units."""
    ms = _ms(value)
    return duration_text(ms) if ms is not None else ""

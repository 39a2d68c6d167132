"""How a span of time reads to an operator: ``duration_text`` ("3 min", "2 h 5 min") and
``relative_text`` ("3 min ago", "in 12 s"). Pure: milliseconds in, text out; no database."""

from __future__ import annotations

_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def duration_text(ms: int) -> str:
    """``ms`` (a non-negative span, ms) in its two largest units: ``850 ms``, ``12 s``,
    ``3 min 5 s``, ``2 h 5 min``, ``4 d 1 h``. Negative spans read as their size."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms} ms"
    parts = []
    rest = ms
    for size, unit in _UNITS:
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
        elif parts:
            break  # never skip a unit: "2 h 5 s" would hide the minutes
        if len(parts) == 2:
            break
    return " ".join(parts)


def relative_text(timestamp_ms: int, now_ms: int) -> str:
    """``timestamp_ms`` seen from ``now_ms`` (both ms since the epoch): ``3 min ago``,
    ``in 12 s``, or ``now`` within a second."""
    delta = now_ms - timestamp_ms
    if abs(delta) < 1000:
        return "now"
    text = duration_text(delta)
    return f"{text} ago" if delta > 0 else f"in {text}"

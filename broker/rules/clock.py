"""The broker's clock: milliseconds since the Unix epoch, as RocketMQ's ``*_timestamp`` fields."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the Unix epoch (RocketMQ's ``*_timestamp`` fields: store time, born
    time, check times)."""
    return time.time_ns() // 1_000_000

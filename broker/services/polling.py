"""Long polling for receive and check-requests, without holding a database connection."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")

POLL_SLEEP_S = 0.1  # between empty tries: ~10 index reads a second per waiting caller


def poll_until(fetch: Callable[[], list[T]], *, wait_ms: int) -> list[T]:
    """Call ``fetch`` until it returns something or ``wait_ms`` ms have passed.

    Between tries the database connection goes back to the pool (or is closed), so a caller
    waiting for messages holds no connection. Returns the last result (possibly empty).
    """
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        result = fetch()
        remaining = deadline - time.monotonic()
        if result or remaining <= 0:
            return result
        if not connection.in_atomic_block:
            connection.close()
        time.sleep(min(POLL_SLEEP_S, remaining))

"""The timer: the loop that delivers delay and timer messages when due (RocketMQ
``TimerMessageStore``'s dequeue services), run by ``python -m halfmoon.timer``.

It sleeps until the earliest due time, or until a send schedules something (a wake-up on
``timers_channel``, published on commit), never polling while nothing is due: idle, it reads
the database once per ``HELD_RECHECK_S`` (a missed wake-up costs at most that), or every
``FALLBACK_RECHECK_S`` while Redis is away. Several timers may run (SKIP LOCKED shares the due
messages); a timer killed mid-move leaves its batch undelivered, for the next move.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, close_old_connections

from broker.plumbing.wakeup_listeners import SyncListener
from broker.plumbing.wakeups import timers_channel
from broker.rules.clock import now_ms
from broker.selectors.scheduled_messages import scheduled_message_next_due
from broker.services.timers.deliver import DELIVER_BATCH, scheduled_messages_deliver

logger = logging.getLogger("halfmoon.timers")

WAKEUP_SETTLE_S = 0.01
"""After a wake-up, the others arriving this soon are read with it: a burst of sends costs the
database one read of the next due time per 10 ms, not one per send."""

DATABASE_RETRY_S = 1.0
"""How long the timer waits after a database error before trying again."""


def timer_sleep_s(next_due: int | None, *, now: int, recheck_s: float) -> float:
    """How long the timer sleeps (s) when the earliest due message is ``next_due`` (ms, or
    None): until then, at most ``recheck_s``."""
    if next_due is None:
        return recheck_s
    return max(0.0, min(recheck_s, (next_due - now) / 1000))


def timer_round() -> int | None:
    """Deliver everything due now, batch after batch; return the next due time (ms) or None."""
    while scheduled_messages_deliver() == DELIVER_BATCH:
        pass
    return scheduled_message_next_due()


def timer_run(stop: threading.Event) -> None:
    """Deliver due messages until ``stop`` is set (``timer_round``), sleeping in between on
    ``timers_channel`` until the next due time (``timer_sleep_s``). Database errors are
    logged and retried after ``DATABASE_RETRY_S``; nothing is delivered twice meanwhile."""
    with SyncListener(timers_channel()) as listener:
        while not stop.is_set():
            try:
                next_due = timer_round()
            except DatabaseError as exc:
                logger.warning("the timer could not read or move due messages: %s", exc)
                close_old_connections()
                stop.wait(DATABASE_RETRY_S)
                continue
            sleep_s = timer_sleep_s(next_due, now=now_ms(), recheck_s=listener.recheck_s())
            if sleep_s > 0 and listener.wait(sleep_s):
                stop.wait(WAKEUP_SETTLE_S)
                listener.drain()

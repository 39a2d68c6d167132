"""The timer loop (``broker.services.timers.runner``): it sleeps until the earliest due time,
and a send that schedules something earlier wakes it (Redis pub/sub), so nothing is delivered
early and nothing waits for a re-check."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from broker.models import Message, ScheduledMessage
from broker.plumbing import wakeup_listeners
from broker.plumbing.wakeups import timers_channel, wakeup_publish
from broker.rules.clock import now_ms
from broker.services.timers.runner import timer_run, timer_sleep_s
from broker.services.timers.schedule import message_send_at
from broker.services.topology.writes import topic_create

HOUR = 3_600_000


def test_the_sleep_is_until_the_next_due_time_at_most_the_recheck():
    assert timer_sleep_s(None, now=1000, recheck_s=5.0) == 5.0
    assert timer_sleep_s(3000, now=1000, recheck_s=5.0) == 2.0
    assert timer_sleep_s(500, now=1000, recheck_s=5.0) == 0.0
    assert timer_sleep_s(100_000, now=1000, recheck_s=5.0) == 5.0


def _wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.django_db(transaction=True)
def test_a_send_due_sooner_wakes_the_sleeping_timer_and_nothing_is_early(monkeypatch):
    # No re-check to fall back on: only the wake-up and the due time can move the message.
    monkeypatch.setattr(wakeup_listeners, "HELD_RECHECK_S", 600.0)
    topic_create(name="Orders", queue_nums=1)
    message_send_at(delivery_timestamp=now_ms() + HOUR, topic="Orders", body=b"later")
    stop = threading.Event()

    def run() -> None:
        try:
            timer_run(stop)
        finally:
            connection.close()

    timer = threading.Thread(target=run, daemon=True)
    timer.start()
    try:
        time.sleep(0.5)  # asleep until the hour, subscribed
        soon = message_send_at(delivery_timestamp=now_ms() + 300, topic="Orders", body=b"soon")
        assert _wait_for(
            lambda: ScheduledMessage.objects.get(pk=soon.pk).state == "DELIVERED", 60
        ), "the timer was not woken by the send"
        copy = Message.objects.get(topic="Orders")
        assert bytes(copy.body) == b"soon"
        assert copy.store_timestamp >= soon.delivery_timestamp  # never early
        assert ScheduledMessage.objects.filter(state="SCHEDULED").count() == 1
    finally:
        stop.set()
        wakeup_publish([timers_channel()])
        timer.join(30)
    assert not timer.is_alive()

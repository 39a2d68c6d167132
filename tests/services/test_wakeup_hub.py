"""``broker.plumbing.wakeup_listeners.WakeupHub``: one wake-up per key of competing waiters, not one per
waiter, and a wake-up never dropped: passed on when its waiter leaves without reading for it or
found something. Against the real Redis (the test settings' ``REDIS_URL``)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from broker.plumbing import wakeup_listeners
from broker.plumbing.wakeup_listeners import Listener, WakeupHub
from broker.plumbing.wakeups import topic_channel, wakeup_publish

CHANNEL = topic_channel("HubTest")


def run(scenario: Callable[[WakeupHub], Awaitable[Any]]) -> Any:
    """Run ``scenario(hub)`` on a subscribed hub of its own event loop, then close the hub."""

    async def main() -> Any:
        hub = WakeupHub(settings.REDIS_URL)
        hub.start()
        await asyncio.wait_for(hub.subscribed.wait(), 5)
        try:
            return await scenario(hub)
        finally:
            await hub.close()

    return asyncio.run(main())


async def published(hub: WakeupHub) -> None:
    """Publish one wake-up on CHANNEL and return once the hub has seen it."""
    before = hub.generation(CHANNEL)
    await asyncio.to_thread(wakeup_publish, [CHANNEL])
    for _ in range(500):
        if hub.generation(CHANNEL) != before:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the hub never saw the wake-up")


def woken(listeners: list[Listener]) -> list[bool]:
    return [listener.event.is_set() for listener in listeners]


def listening(hub: WakeupHub, key: str, n: int, channel: str = CHANNEL) -> list[Listener]:
    """``n`` waiters of ``key`` on ``channel``, registered in that order (leave one with
    ``__exit__``, as the end of its ``with`` block would)."""
    listeners = [hub.listen(channel, key) for _ in range(n)]
    for listener in listeners:
        listener.__enter__()
    return listeners


def test_a_wakeup_wakes_one_waiter_per_key_the_longest_waiting():
    async def scenario(hub: WakeupHub) -> tuple[list[bool], list[bool]]:
        a, b = listening(hub, "A", 3), listening(hub, "B", 2)
        await published(hub)
        return woken(a), woken(b)

    assert run(scenario) == ([True, False, False], [True, False])


def test_a_second_wakeup_while_one_is_unread_wakes_nobody_more():
    async def scenario(hub: WakeupHub) -> list[bool]:
        a = listening(hub, "A", 3)
        await published(hub)
        await published(hub)
        return woken(a)

    assert run(scenario) == [True, False, False]


def test_a_waiter_leaving_with_an_unread_wakeup_passes_it_on():
    async def scenario(hub: WakeupHub) -> list[bool]:
        first, second = listening(hub, "A", 2)
        await published(hub)
        assert woken([first, second]) == [True, False]
        first.__exit__(None, None, None)  # its wait_ms ran out before it read
        return woken([second])

    assert run(scenario) == [True]


def test_a_waiter_whose_read_found_something_passes_the_wakeup_on():
    async def scenario(hub: WakeupHub) -> list[bool]:
        first, second = listening(hub, "A", 2)
        await published(hub)
        assert await first.wait(1)  # read for it ...
        first.answered = True  # ... and found something: more may have come with it
        first.__exit__(None, None, None)
        return woken([second])

    assert run(scenario) == [True]


def test_a_waiter_whose_read_found_nothing_passes_nothing_on():
    async def scenario(hub: WakeupHub) -> list[bool]:
        first, second = listening(hub, "A", 2)
        await published(hub)
        assert await first.wait(1)  # read, found nothing (another process took it) ...
        first.__exit__(None, None, None)  # ... and left
        return woken([second])

    assert run(scenario) == [False]


def test_after_redis_came_back_every_waiter_is_woken():
    """Notifications may have been missed while Redis was away: no key is trusted then."""

    async def scenario(hub: WakeupHub) -> list[bool]:
        a = listening(hub, "A", 2)
        hub._wake_all()
        return woken(a)

    assert run(scenario) == [True, True]


def test_the_recheck_tick_wakes_one_waiter_per_key_not_every_waiter(monkeypatch):
    """Redeliveries publish nothing: every HELD_RECHECK_S the hub wakes one waiter per key of
    every channel (one read per consumer group, not one per waiter); a waiter's own timeout is
    its deadline while the hub is subscribed."""
    monkeypatch.setattr(wakeup_listeners, "HELD_RECHECK_S", 0.2)

    async def scenario(hub: WakeupHub) -> tuple[list[bool], list[bool], float]:
        a = listening(hub, "A", 3)
        b = listening(hub, "B", 2, channel=topic_channel("OtherHubTest"))
        await asyncio.sleep(0.5)
        return woken(a), woken(b), a[0].recheck_s()

    a, b, recheck_s = run(scenario)

    assert (a, b) == ([True, False, False], [True, False])
    assert recheck_s == math.inf

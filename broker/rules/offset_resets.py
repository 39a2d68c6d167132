"""Pure rules of a consumer group's offset reset (RocketMQ ``resetOffsetByTime``, the
dashboard's "reset offset" and "skip accumulated"): per queue, where the group's offset goes
and how many messages that delivers again or skips. No database.

A queue's ``current`` offset is the group's ``ConsumerOffset.offset`` (the next queue offset it
has not taken). The target of a reset to a time T is the first queue offset whose
``store_timestamp`` >= T, or the queue end (``ConsumeQueue.max_offset``) when no message is that
recent (RocketMQ ``ConsumeQueue.getOffsetInQueueByTime`` answers the max offset then); the
target of "skip the backlog" is the queue end. A target below ``current`` delivers the messages
of ``[target, current)`` again (``redeliver``); a target above skips ``[current, target)``
(``skip``); a forward move never goes below the offset the group holds at the time it is
applied (``offset_forwarded``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

Direction = Literal["back", "forward", "none"]


@dataclass(frozen=True)
class QueuePosition:
    """One queue the group has an offset on, as read at the preview.

    ``current``: the group's offset; ``target``: the reset's target offset (``reset_target``);
    ``messages_between``: the stored messages with a queue offset in
    ``[min(current, target), max(current, target))``."""

    topic: str
    queue_id: int
    current: int
    target: int
    messages_between: int


@dataclass(frozen=True)
class QueuePlan:
    """What a reset does to one queue: from ``current`` to ``new``; ``redeliver`` messages
    (``[new, current)``) handed out again, or ``skip`` messages (``[current, new)``) passed."""

    topic: str
    queue_id: int
    current: int
    new: int
    direction: Direction
    redeliver: int
    skip: int

    def as_json(self) -> dict[str, Any]:
        """The plan row as stored in the audit entry's ``scope.queues``."""
        return asdict(self)


def reset_target(*, first_at_time: int | None, queue_end: int) -> int:
    """The queue offset a reset to a time moves to: ``first_at_time`` (the first queue offset
    stored at or after the time), or ``queue_end`` when there is none (RocketMQ
    ``getOffsetInQueueByTime``)."""
    return queue_end if first_at_time is None else first_at_time


def queue_plan(position: QueuePosition) -> QueuePlan:
    """The plan of one queue: back (redeliver ``messages_between``), forward (skip them) or
    none (the target is the current offset)."""
    p = position
    if p.target < p.current:
        direction: Direction = "back"
    elif p.target > p.current:
        direction = "forward"
    else:
        direction = "none"
    return QueuePlan(
        topic=p.topic,
        queue_id=p.queue_id,
        current=p.current,
        new=p.target,
        direction=direction,
        redeliver=p.messages_between if direction == "back" else 0,
        skip=p.messages_between if direction == "forward" else 0,
    )


def offset_reset_plan(positions: Iterable[QueuePosition]) -> list[QueuePlan]:
    """Every queue's plan, by topic then queue id."""
    return sorted((queue_plan(p) for p in positions), key=lambda q: (q.topic, q.queue_id))


def plan_totals(plans: Iterable[QueuePlan | Mapping[str, Any]]) -> tuple[int, int]:
    """``(redeliver, skip)`` summed over the plans (``QueuePlan`` or their JSON rows)."""
    redeliver = skip = 0
    for q in plans:
        row = q.as_json() if isinstance(q, QueuePlan) else q
        redeliver += int(row["redeliver"])
        skip += int(row["skip"])
    return redeliver, skip


def offset_forwarded(*, held: int, new: int) -> int:
    """The offset a forward reset writes: ``max(held, new)``, ``held`` being the group's offset
    when the reset is applied (a receive since the preview may have moved it past ``new``).
    A forward reset never moves an offset backward."""
    return max(held, new)

"""Reads of delay and timer messages (``ScheduledMessage``): the timer's next due time, the
console's and the API's lists (by due time), one message's row, and which stored messages are
scheduled ones or their delivered copies (the message search)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from django.db.models import Count, Min, Q, QuerySet

from broker.models import ScheduledMessage
from broker.rules.timers import ScheduleEvent, schedule_timeline
from broker.selectors.grants import producer_group_in_own_or_operated
from broker.selectors.queries import key_match

SCHEDULED_PAGE = 100
"""Rows of one page of the scheduled-messages list."""


def scheduled_message_next_due() -> int | None:
    """The earliest due time (ms) of a SCHEDULED message, or None (the index
    ``scheduled_due``: one read whatever the number scheduled)."""
    return (
        ScheduledMessage.objects.filter(state=ScheduledMessage.State.SCHEDULED)
        .order_by("delivery_timestamp", "commit_log_offset")
        .values_list("delivery_timestamp", flat=True)
        .first()
    )


def scheduled_messages(
    *,
    topic: str = "",
    key: str = "",
    msg_id: str = "",
    state: str = "",
    due_after: int | None = None,
    due_before: int | None = None,
    producer_groups: Collection[str] | None = None,
    operator_access_key_id: int | None = None,
) -> QuerySet[ScheduledMessage]:
    """Scheduled messages by due time, earliest first (then commit log offset): of ``topic``,
    with ``key`` among their keys (``key_match``), of ``msg_id``, in ``state`` ("" any), due in
    ``[due_after, due_before)`` (ms). ``producer_groups`` None: every group's; else those
    groups' only, plus with ``operator_access_key_id`` the producer groups that access key
    operates (``producer_group_in_own_or_operated``)."""
    rows: QuerySet[ScheduledMessage] = ScheduledMessage.objects.all()
    if state:
        rows = rows.filter(state=state)
    if topic:
        rows = rows.filter(topic=topic)
    if msg_id:
        rows = rows.filter(msg_id=msg_id)
    if key:
        rows = rows.filter(key_match(key))
    if due_after is not None:
        rows = rows.filter(delivery_timestamp__gte=due_after)
    if due_before is not None:
        rows = rows.filter(delivery_timestamp__lt=due_before)
    if producer_groups is not None and operator_access_key_id is not None:
        rows = rows.filter(
            producer_group_in_own_or_operated(
                producer_groups, operated_by_access_key_id=operator_access_key_id
            )
        )
    elif producer_groups is not None:
        rows = rows.filter(producer_group__in=sorted(producer_groups))
    return rows.order_by("delivery_timestamp", "commit_log_offset")


def scheduled_message_list(
    *,
    topic: str = "",
    key: str = "",
    msg_id: str = "",
    state: str = ScheduledMessage.State.SCHEDULED,
    limit: int = SCHEDULED_PAGE,
) -> list[ScheduledMessage]:
    """The first ``limit`` of ``scheduled_messages`` (by due time, earliest first), SCHEDULED
    ones unless ``state`` says otherwise ("" every state)."""
    return list(scheduled_messages(topic=topic, key=key, msg_id=msg_id, state=state)[:limit])


def scheduled_message_find(*, topic: str, msg_id: str) -> ScheduledMessage | None:
    """The scheduled message ``msg_id`` of ``topic`` a recall takes (the latest stored), or
    None."""
    return (
        ScheduledMessage.objects.filter(topic=topic, msg_id=msg_id)
        .order_by("-commit_log_offset")
        .first()
    )


def scheduled_of_messages(commit_log_offsets: Collection[int]) -> dict[int, ScheduledMessage]:
    """For each of the messages at ``commit_log_offsets`` that is a scheduled message as
    stored when sent (on RMQ_SYS_WHEEL_TIMER) or the copy the timer delivered on its topic,
    its ``ScheduledMessage``, by that commit log offset. One query (the primary key and the
    unique ``delivered_commit_log_offset``)."""
    offsets = sorted(set(commit_log_offsets))
    if not offsets:
        return {}
    found: dict[int, ScheduledMessage] = {}
    rows = ScheduledMessage.objects.filter(
        Q(pk__in=offsets) | Q(delivered_commit_log_offset__in=offsets)
    )
    wanted = set(offsets)
    for row in rows:
        for offset in (row.commit_log_offset, row.delivered_commit_log_offset):
            if offset in wanted:
                found[offset] = row
    return found


def scheduled_message_timeline(row: ScheduledMessage, *, now: int) -> list[ScheduleEvent]:
    """The timeline of ``row`` (``broker.rules.timers.schedule_timeline``): sent, due, and
    delivered (the copy's commit log offset) or recalled (by whom, why), oldest first; ``now``
    (ms) says whether its due time is still ahead."""
    return schedule_timeline(
        state=row.state,
        topic=row.topic,
        commit_log_offset=row.commit_log_offset,
        scheduled_timestamp=row.scheduled_timestamp,
        delivery_timestamp=row.delivery_timestamp,
        ended_timestamp=row.ended_timestamp,
        delivered_commit_log_offset=row.delivered_commit_log_offset,
        recalled_by=row.recalled_by,
        recall_reason=row.recall_reason,
        now=now,
    )


def scheduled_message_get(commit_log_offset: int) -> ScheduledMessage | None:
    """The scheduled message whose stored copy on RMQ_SYS_WHEEL_TIMER is at
    ``commit_log_offset``, or None."""
    return ScheduledMessage.objects.filter(pk=commit_log_offset).first()


def scheduled_message_of(msg_id: str) -> ScheduledMessage | None:
    """The latest scheduled message of ``msg_id`` (any topic), or None."""
    return ScheduledMessage.objects.filter(msg_id=msg_id).order_by("-commit_log_offset").first()


@dataclass(frozen=True)
class ScheduledWaiting:
    """How many messages wait for their time, and the earliest one's due time (ms, or None)."""

    waiting: int
    next_due: int | None


def scheduled_waiting() -> ScheduledWaiting:
    """The SCHEDULED messages' count and earliest due time (the partial index ``scheduled_due``
    only)."""
    waiting = ScheduledMessage.objects.filter(state=ScheduledMessage.State.SCHEDULED).count()
    return ScheduledWaiting(waiting, scheduled_message_next_due() if waiting else None)


def scheduled_counts() -> dict[str, int]:
    """How many scheduled messages there are per state (``SCHEDULED``, ``DELIVERED``,
    ``RECALLED``), and the earliest due time (``next_due``, ms, or 0)."""
    counts = dict.fromkeys(ScheduledMessage.State.values, 0)
    for row in ScheduledMessage.objects.values("state").annotate(n=Count("pk")):
        counts[row["state"]] = row["n"]
    counts["next_due"] = scheduled_message_next_due() or 0
    return counts


@dataclass(frozen=True)
class OverdueTopic:
    """The SCHEDULED messages of one topic due before some time: how many (``overdue``) and
    the earliest due time of them (ms)."""

    topic: str
    overdue: int
    oldest_due_timestamp: int


def scheduled_overdue_by_topic(due_before: int) -> dict[str, OverdueTopic]:
    """Per topic, its SCHEDULED messages due before ``due_before`` (ms): still waiting after
    their time (the alert ``scheduled_overdue``). One read of the partial index
    ``scheduled_due``, grouped; topics with none are absent."""
    rows = (
        ScheduledMessage.objects.filter(
            state=ScheduledMessage.State.SCHEDULED, delivery_timestamp__lt=due_before
        )
        .values("topic")
        .annotate(n=Count("pk"), oldest=Min("delivery_timestamp"))
        .order_by()
    )
    return {r["topic"]: OverdueTopic(r["topic"], r["n"], r["oldest"]) for r in rows}


def scheduled_overdue_count(now: int) -> int:
    """How many SCHEDULED messages were due before ``now`` (ms) and are still waiting (the
    metric ``halfmoon_scheduled_overdue_messages``; the partial index ``scheduled_due``)."""
    return ScheduledMessage.objects.filter(
        state=ScheduledMessage.State.SCHEDULED, delivery_timestamp__lt=now
    ).count()


def scheduled_messages_present(commit_log_offsets: Collection[int]) -> set[int]:
    """Which of ``commit_log_offsets`` (of messages on the timer topic) still have their
    ``ScheduledMessage`` row, so a page can link to it. One query by primary key."""
    if not commit_log_offsets:
        return set()
    return set(
        ScheduledMessage.objects.filter(pk__in=list(commit_log_offsets)).values_list(
            "pk", flat=True
        )
    )

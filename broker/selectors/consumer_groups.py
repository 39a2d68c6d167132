"""Reads behind a consumer group's operations (``broker.services.consumption``): its
offsets per queue with their lag, where a reset to a time would move them, its dead letters
(``%DLQ%{group}``) with their original messages, and the audit entries of its operations.

Each read costs a constant number of queries whatever the number of queues."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

from django.core.paginator import Page, Paginator
from django.db.models import Count, Min, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from broker.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELIVERY_ATTEMPT,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    dlq_topic,
)
from broker.errors import NotFound, not_found
from broker.models import AuditEntry, AuditTarget, ConsumeQueue, ConsumerOffset, Message
from broker.rules.offset_resets import QueuePosition, reset_target
from broker.rules.topics import is_undeliverable_topic

DEAD_LETTERS_PAGE = 100

OFFSET_RESET_ACTIONS = (AuditEntry.Action.RESET_OFFSET, AuditEntry.Action.SKIP_BACKLOG)
DEAD_LETTER_SET_ACTIONS = (AuditEntry.Action.RESEND_DEAD_LETTERS,)
DEAD_LETTER_ACTIONS = (AuditEntry.Action.RESEND_DEAD_LETTER, *DEAD_LETTER_SET_ACTIONS)
GROUP_ACTIONS = (
    *OFFSET_RESET_ACTIONS,
    AuditEntry.Action.RESEND_MESSAGE,
    *DEAD_LETTER_ACTIONS,
    AuditEntry.Action.DEAD_LETTER_HEAD,
)
"""Every ``AuditEntry.Action`` of a consumer-group operation (its ``scope.consumer_group``)."""
OPERATIONS_SHOWN = 20
DEAD_LETTER_SET_PAGE = 100


@dataclass(frozen=True)
class GroupQueueOffset:
    """The group's offset on one queue: ``offset`` (next queue offset not taken),
    ``max_offset`` (the queue's next append) and ``lag`` (``max_offset - offset``, at least 0;
    RocketMQ's diffTotal per queue)."""

    topic: str
    queue_id: int
    offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.offset)


def consumer_group_offsets(
    *, consumer_group: str, topic: str | None = None
) -> list[GroupQueueOffset]:
    """The group's offsets by topic then queue id (``topic`` narrows to one), each with its
    queue's max offset. One query."""
    max_offset = ConsumeQueue.objects.filter(
        topic=OuterRef("topic"), queue_id=OuterRef("queue_id")
    ).values("max_offset")[:1]
    qs = ConsumerOffset.objects.filter(consumer_group=consumer_group)
    if topic:
        qs = qs.filter(topic=topic)
    rows = (
        qs.annotate(max_offset=Coalesce(Subquery(max_offset), "offset"))
        .order_by("topic", "queue_id")
        .values_list("topic", "queue_id", "offset", "max_offset")
    )
    return [GroupQueueOffset(t, q, o, m) for t, q, o, m in rows]


def offset_reset_positions(
    *, consumer_group: str, topic: str | None = None, timestamp: int | None
) -> list[QueuePosition]:
    """Per queue the group has an offset on (``topic`` narrows to one): its offset, the
    reset's target and the stored messages between them (``QueuePosition``).

    Args:
        timestamp: the time to reset to (ms): the target is the first queue offset whose
            ``store_timestamp`` >= it, else the queue end (RocketMQ ``resetOffsetByTime``);
            None: the queue end (skip the backlog).

    Three queries: the offsets with their queue ends, the first offsets at the time (one
    ``GROUP BY`` through the ``(topic, store_timestamp)`` index), the counts between.
    """
    offsets = consumer_group_offsets(consumer_group=consumer_group, topic=topic)
    if not offsets:
        return []
    first: dict[tuple[str, int], int] = {}
    if timestamp is not None:
        topics = sorted({o.topic for o in offsets})
        first = {
            (t, q): n
            for t, q, n in Message.objects.filter(topic__in=topics, store_timestamp__gte=timestamp)
            .values("topic", "queue_id")
            .annotate(n=Min("queue_offset"))
            .order_by()
            .values_list("topic", "queue_id", "n")
        }
    targets = {
        (o.topic, o.queue_id): reset_target(
            first_at_time=first.get((o.topic, o.queue_id)), queue_end=o.max_offset
        )
        for o in offsets
    }
    ranges = [
        Q(
            topic=o.topic,
            queue_id=o.queue_id,
            queue_offset__gte=min(o.offset, targets[(o.topic, o.queue_id)]),
            queue_offset__lt=max(o.offset, targets[(o.topic, o.queue_id)]),
        )
        for o in offsets
        if targets[(o.topic, o.queue_id)] != o.offset
    ]
    between: dict[tuple[str, int], int] = {}
    if ranges:
        between = {
            (t, q): n
            for t, q, n in Message.objects.filter(reduce(operator.or_, ranges))
            .values("topic", "queue_id")
            .annotate(n=Count("*"))
            .order_by()
            .values_list("topic", "queue_id", "n")
        }
    return [
        QueuePosition(
            topic=o.topic,
            queue_id=o.queue_id,
            current=o.offset,
            target=targets[(o.topic, o.queue_id)],
            messages_between=between.get((o.topic, o.queue_id), 0),
        )
        for o in offsets
    ]


@dataclass(frozen=True)
class DeadLetter:
    """A message on ``%DLQ%{group}`` (``message``, the copy) and where it came from:
    ``origin_msg_id``, ``origin_topic``, the ``delivery_attempt`` it was dead-lettered at, and
    ``resent``: how many times an operator has resent it to the group."""

    message: Message
    origin_msg_id: str
    origin_topic: str
    delivery_attempt: int
    resent: int


def _dead_letter(m: Message, resent: int) -> DeadLetter:
    props = m.properties or {}
    attempt = str(props.get(PROPERTY_DELIVERY_ATTEMPT, "0"))
    return DeadLetter(
        message=m,
        origin_msg_id=str(props.get(PROPERTY_ORIGIN_MESSAGE_ID, m.msg_id)),
        origin_topic=str(props.get(PROPERTY_RETRY_TOPIC, "")),
        delivery_attempt=int(attempt) if attempt.isdigit() else 0,
        resent=resent,
    )


def _resent_counts(offsets: list[int]) -> dict[int, int]:
    """How many times each dead letter (commit log offset) was resent: its ``done`` audit
    targets (``AuditTarget.commit_log_offset``) of the resend actions."""
    rows = (
        AuditTarget.objects.filter(
            entry__action__in=DEAD_LETTER_ACTIONS,
            commit_log_offset__in=offsets,
            result=AuditTarget.Result.DONE,
        )
        .values("commit_log_offset")
        .annotate(n=Count("*"))
        .order_by()
        .values_list("commit_log_offset", "n")
    )
    return dict(rows)


def dead_letters(
    *, consumer_group: str, before: int | None = None, limit: int = DEAD_LETTERS_PAGE
) -> list[DeadLetter]:
    """The group's dead letters newest first (by commit log offset, below ``before`` when
    given), at most ``limit``. Two queries."""
    qs = Message.objects.filter(topic=dlq_topic(consumer_group))
    if before is not None:
        qs = qs.filter(commit_log_offset__lt=before)
    rows = list(qs.order_by("-commit_log_offset")[:limit])
    resent = _resent_counts([m.commit_log_offset for m in rows])
    return [_dead_letter(m, resent.get(m.commit_log_offset, 0)) for m in rows]


def dead_letter_get(*, consumer_group: str, commit_log_offset: int) -> DeadLetter:
    """One dead letter of the group by the commit log offset of its DLQ copy.

    Raises:
        NotFound: ``dead_letter_not_found``.
    """
    m = Message.objects.filter(
        topic=dlq_topic(consumer_group), commit_log_offset=commit_log_offset
    ).first()
    if m is None:
        raise NotFound(
            f"Consumer group {consumer_group} has no dead letter at commit log offset "
            f"{commit_log_offset}.",
            code="dead_letter_not_found",
            details={"consumer_group": consumer_group, "commit_log_offset": commit_log_offset},
        )
    return _dead_letter(m, _resent_counts([m.commit_log_offset]).get(m.commit_log_offset, 0))


def dead_letter_original(dead: DeadLetter) -> Message | None:
    """The original message a dead letter is the copy of (its ``RETRY_TOPIC`` and
    ``ORIGIN_MESSAGE_ID``, the first stored), None when it is no longer stored."""
    return (
        Message.objects.filter(topic=dead.origin_topic, msg_id=dead.origin_msg_id)
        .order_by("commit_log_offset")
        .first()
    )


def consumer_group_op_get(entry_id: int, actions: tuple[str, ...]) -> AuditEntry:
    """The audit entry ``entry_id`` of one of ``actions`` (an offset reset or skip, a dead
    letter set).

    Raises:
        NotFound: ``offset_reset_not_found`` or ``dead_letter_resend_not_found``.
    """
    entry = AuditEntry.objects.filter(pk=entry_id, action__in=actions).first()
    if entry is None:
        kind = "dead_letter_resend" if actions == DEAD_LETTER_SET_ACTIONS else "offset_reset"
        raise NotFound(
            f"There is no {kind.replace('_', ' ')} {entry_id}.",
            code=f"{kind}_not_found",
            details={"id": entry_id},
        )
    return entry


def consumer_group_operations(
    consumer_group: str, *, limit: int = OPERATIONS_SHOWN
) -> list[AuditEntry]:
    """The group's latest operations (``GROUP_ACTIONS``), newest first, at most ``limit``. One
    query."""
    return list(
        AuditEntry.objects.filter(
            action__in=GROUP_ACTIONS, scope__consumer_group=consumer_group
        ).order_by("-id")[:limit]
    )


def dead_letter_set_page(
    entry: AuditEntry, *, page: int = 1, per_page: int = DEAD_LETTER_SET_PAGE
) -> Page:
    """Page ``page`` (1-based; out of range gives the last) of a dead-letter set's targets in
    their frozen order (``AuditTarget`` rows: ``commit_log_offset`` of the DLQ copy, ``result``,
    ``detail``). Two queries."""
    return Paginator(entry.targets.order_by("id"), per_page).get_page(page)


def consumer_group_of_entry(entry: AuditEntry) -> str:
    """The consumer group an operation's entry acts on (its ``scope.consumer_group``)."""
    return str(entry.scope.get("consumer_group", ""))


def message_to_resend(*, msg_id: str, topic: str | None = None) -> Message:
    """The message ``msg_id`` (on ``topic`` when given) a resend names: the first stored on a
    topic consumers receive from, dead-letter copies (``%DLQ%*``, which keep the msg id) left
    out.

    Raises:
        NotFound: ``message_not_found``.
    """
    qs = Message.objects.filter(msg_id=msg_id).exclude(topic__startswith=DLQ_GROUP_TOPIC_PREFIX)
    if topic:
        qs = qs.filter(topic=topic)
    for m in qs.order_by("commit_log_offset")[:20]:
        if not is_undeliverable_topic(m.topic):
            return m
    raise not_found("message", msg_id)

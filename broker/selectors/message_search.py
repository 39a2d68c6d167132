"""The message search: every message the database holds (normal, half, Op, committed, retry,
dead-lettered, discarded), by topic and store time, key, tag, msg id or transaction id, newest
first in keyset pages; one message with where it stands with each consumer group; and, for
what the database no longer holds, which archive segments do (RocketMQ's queryMessage and
viewMessage, rocketmq-dashboard's message query).

Each search is one indexed query (``broker.models.Message``'s indexes): a msg id by
``message_msg_id``, a key by ``message_keys`` / ``message_multi_keys``, a topic and time range
by ``message_topic_store_time``, a message group by ``message_group_store_time``, a time range
alone by ``message_store_time``; delay messages by their ``ScheduledMessage`` rows. Pages are in
(``store_timestamp``, ``commit_log_offset``) order, newest first: a page is read from its
cursor, never by OFFSET. Measured by ``bench/message_search.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import F, Q, QuerySet

from broker.constants import TIMER_TOPIC
from broker.models import (
    ARCHIVE_WATERMARK,
    ArchiveSegment,
    ArchiveWatermark,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    ScheduledMessage,
    Transaction,
)
from broker.rules.messages import DeliveryState, MessageKind, delivery_state, message_kind
from broker.selectors.queries import key_match
from broker.selectors.scheduled_messages import scheduled_of_messages
from broker.selectors.subscriptions import groups_filtering_out

SEARCH_PAGE_DEFAULT = 50
SEARCH_PAGE_MAX = 200
ARCHIVE_SEGMENTS_SHOWN = 20  # an archive note lists the newest segments of the range, with a count


@dataclass(frozen=True)
class MessageQuery:
    """A message search. Every field narrows it; all empty matches every message.

    ``topic``, ``tag``: exact; ``key``: one of the message's keys; ``msg_id``: its msg id,
    which for a transactional message is also its transaction id (UNIQ_KEY: the half message,
    its committed copy and its dead letters share it); ``start_ms`` / ``end_ms``: store time
    range ``[start_ms, end_ms)``, ms; ``scheduled_state``: only delay and timer messages as
    sent (on ``RMQ_SYS_WHEEL_TIMER``) whose ``ScheduledMessage`` is in that state
    (``SCHEDULED``, ``DELIVERED``, ``RECALLED``); ``due_start_ms`` / ``due_end_ms``: only
    those due in ``[due_start_ms, due_end_ms)``, ms (with either scheduled filter, ``topic``
    is the topic they are for, their real topic); ``message_group``: only FIFO messages of
    that message group; ``producer_groups``: only messages those groups sent (None: any
    group; an access key's rights).
    """

    topic: str = ""
    key: str = ""
    tag: str = ""
    msg_id: str = ""
    start_ms: int | None = None
    end_ms: int | None = None
    scheduled_state: str = ""
    due_start_ms: int | None = None
    due_end_ms: int | None = None
    message_group: str = ""
    producer_groups: frozenset[str] | None = None

    @property
    def scheduled_only(self) -> bool:
        """Only delay and timer messages as sent: a state or a due time range is given."""
        return bool(self.scheduled_state) or (
            self.due_start_ms is not None or self.due_end_ms is not None
        )

    def filter(self) -> Q:
        """The query's condition on ``Message``."""
        condition = Q()
        if self.msg_id:
            condition &= Q(msg_id=self.msg_id)
        if self.key:
            condition &= key_match(self.key)
        if self.topic and not self.scheduled_only:
            condition &= Q(topic=self.topic)
        if self.tag:
            condition &= Q(tags=self.tag)
        if self.start_ms is not None:
            condition &= Q(store_timestamp__gte=self.start_ms)
        if self.end_ms is not None:
            condition &= Q(store_timestamp__lt=self.end_ms)
        if self.scheduled_only:
            condition &= Q(topic=TIMER_TOPIC, commit_log_offset__in=self._scheduled().values("pk"))
        if self.message_group:
            condition &= Q(message_group=self.message_group)
        if self.producer_groups is not None:
            condition &= Q(producer_group__in=sorted(self.producer_groups))
        return condition

    def _scheduled(self) -> QuerySet[ScheduledMessage]:
        """The ``ScheduledMessage`` rows the scheduled filters select (for ``topic``, in
        ``scheduled_state``, due in ``[due_start_ms, due_end_ms)``)."""
        rows = ScheduledMessage.objects.all()
        if self.topic:
            rows = rows.filter(topic=self.topic)
        if self.scheduled_state:
            rows = rows.filter(state=self.scheduled_state)
        if self.due_start_ms is not None:
            rows = rows.filter(delivery_timestamp__gte=self.due_start_ms)
        if self.due_end_ms is not None:
            rows = rows.filter(delivery_timestamp__lt=self.due_end_ms)
        return rows

    @property
    def finds_one_message(self) -> bool:
        """A look-up of one message (by msg id or key) rather than a listing."""
        return bool(self.msg_id or self.key)


@dataclass(frozen=True)
class SearchCursor:
    """A position in the search's order: (``store_timestamp``, ``commit_log_offset``), as the
    opaque text ``<store_timestamp>.<commit_log_offset>`` in URLs."""

    store_timestamp: int
    commit_log_offset: int

    def encode(self) -> str:
        return f"{self.store_timestamp}.{self.commit_log_offset}"

    @classmethod
    def decode(cls, text: str) -> SearchCursor:
        """Raises ValueError for text that ``encode`` did not make."""
        parts = text.split(".")
        if len(parts) != 2 or not all(p.isdigit() and len(p) <= 19 for p in parts):
            raise ValueError(f"not a search cursor: {text!r}")
        return cls(int(parts[0]), int(parts[1]))

    @classmethod
    def of(cls, message: Message) -> SearchCursor:
        return cls(message.store_timestamp, message.commit_log_offset)


@dataclass(frozen=True)
class ArchiveNote:
    """What the database no longer holds of a search: messages stored before
    ``pruned_until`` (ms) were pruned once archived; ``segments`` (the newest
    ``ARCHIVE_SEGMENTS_SHOWN`` overlapping the search's time range) hold them, of ``count``."""

    pruned_until: int
    segments: list[ArchiveSegment]
    count: int


@dataclass
class MessagePage:
    """One page of a search, newest first: ``messages`` (bodies not loaded), the cursors of the
    older (``next_before``) and newer (``previous_after``) pages (None at either end), the
    archive note when the search reaches before what the database holds, and ``scheduled``:
    the ``ScheduledMessage`` of each message that is a delay message as sent or the copy the
    timer delivered, by commit log offset (``scheduled_of_messages``)."""

    messages: list[Message] = field(default_factory=list)
    next_before: SearchCursor | None = None
    previous_after: SearchCursor | None = None
    archive: ArchiveNote | None = None
    scheduled: dict[int, ScheduledMessage] = field(default_factory=dict)

    def kinds(self) -> list[tuple[Message, MessageKind]]:
        """Each message with its kind (``broker.rules.messages.message_kind``)."""
        return [(m, message_kind(m.topic, m.prepared_transaction_offset)) for m in self.messages]


def _older(cursor: SearchCursor) -> Q:
    return Q(store_timestamp__lt=cursor.store_timestamp) | Q(
        store_timestamp=cursor.store_timestamp, commit_log_offset__lt=cursor.commit_log_offset
    )


def _newer(cursor: SearchCursor) -> Q:
    return Q(store_timestamp__gt=cursor.store_timestamp) | Q(
        store_timestamp=cursor.store_timestamp, commit_log_offset__gt=cursor.commit_log_offset
    )


def messages_search(query: MessageQuery) -> QuerySet[Message]:
    """The messages ``query`` matches, newest first (``store_timestamp``, then
    ``commit_log_offset``), without their bodies and properties (deferred)."""
    qs = Message.objects.filter(query.filter()).defer("body", "properties")
    if query.key and not query.msg_id:
        # A key's few rows, read by the key indexes and then sorted: ordered by the columns
        # themselves, the planner walks message_store_time backwards hoping to meet the key
        # soon (it guesses thousands of rows for the GIN arm), which at 10M messages reads them
        # all. An expression no index gives leaves it no such walk.
        return qs.order_by((F("store_timestamp") + 0).desc(), (F("commit_log_offset") + 0).desc())
    return qs.order_by("-store_timestamp", "-commit_log_offset")


def message_search_page(
    query: MessageQuery,
    *,
    before: SearchCursor | None = None,
    after: SearchCursor | None = None,
    per_page: int = SEARCH_PAGE_DEFAULT,
) -> MessagePage:
    """A page of ``query``'s messages: the newest ``per_page`` older than ``before``, or the
    oldest ``per_page`` newer than ``after`` (shown newest first), or the first page. One
    query, plus one for the cursor of the other side, one for the page's scheduled messages,
    plus two for the archive note when the search reaches before the prune
    (``archive_note``).
    """
    qs = messages_search(query)
    if after is not None:
        rows = list(qs.filter(_newer(after)).reverse()[: per_page + 1])
        more_newer = len(rows) > per_page
        messages = rows[:per_page][::-1]
        more_older = True
    else:
        if before is not None:
            qs = qs.filter(_older(before))
        rows = list(qs[: per_page + 1])
        more_older = len(rows) > per_page
        messages = rows[:per_page]
        more_newer = before is not None
    page = MessagePage(messages=messages, scheduled=scheduled_of_messages([m.pk for m in messages]))
    if messages and more_older:
        page.next_before = SearchCursor.of(messages[-1])
    if messages and more_newer:
        page.previous_after = SearchCursor.of(messages[0])
    if not more_older:
        page.archive = archive_note(query)
    return page


def archive_note(query: MessageQuery) -> ArchiveNote | None:
    """Where the messages of ``query`` that the database no longer holds are: None when
    nothing was pruned yet or the query's time range starts after the prune; else the archive
    segments overlapping ``[start_ms, min(end_ms, pruned_until))`` (the whole pruned time for a
    search without a range). Two queries."""
    pruned_until = (
        ArchiveWatermark.objects.filter(name=ARCHIVE_WATERMARK)
        .values_list("pruned_until_timestamp", flat=True)
        .first()
    )
    if not pruned_until:
        return None
    start = query.start_ms or 0
    if start >= pruned_until:
        return None
    end = min(query.end_ms, pruned_until) if query.end_ms is not None else pruned_until
    overlapping = ArchiveSegment.objects.filter(start_timestamp__lt=end, end_timestamp__gt=start)
    segments = list(overlapping.order_by("-start_timestamp")[:ARCHIVE_SEGMENTS_SHOWN])
    count = len(segments)
    if count == ARCHIVE_SEGMENTS_SHOWN:
        count = overlapping.count()
    return ArchiveNote(pruned_until=pruned_until, segments=segments, count=count)


@dataclass(frozen=True)
class GroupDelivery:
    """Where one message stands with one consumer group: ``state``
    (``broker.rules.messages.DeliveryState``), ``deliveries`` (times handed out, the highest
    ``delivery_attempt`` journalled), the first hand-out, the last journal entry and, while a
    ``Delivery`` row holds it, until when it is invisible (ms)."""

    consumer_group: str
    state: DeliveryState
    deliveries: int
    first_delivered_timestamp: int | None
    last_event: str | None
    last_event_timestamp: int | None
    invisible_until: int | None


def message_deliveries(message: Message, *, now: int) -> list[GroupDelivery]:
    """Every consumer group that consumes the message's topic (a queue offset on it) or has
    journalled the message, by name, with where the message stands with it. Four queries
    (the journal by ``delivery_event_message``, the ``Delivery`` rows, the groups' offsets of
    its queue, the topic's subscriptions) and one per group filtering the topic
    (``groups_filtering_out``)."""
    events: dict[str, list[DeliveryEvent]] = {}
    for event in DeliveryEvent.objects.filter(commit_log_offset=message.pk).order_by(
        "timestamp", "id"
    ):
        events.setdefault(event.consumer_group, []).append(event)
    in_flight = dict(
        Delivery.objects.filter(message_id=message.pk).values_list(
            "consumer_group", "invisible_until_timestamp"
        )
    )
    offsets = dict(
        ConsumerOffset.objects.filter(topic=message.topic, queue_id=message.queue_id)
        .exclude(consumer_group__startswith="CID_RMQ_SYS_")
        .values_list("consumer_group", "offset")
    )
    filtered = groups_filtering_out(message)
    out = []
    for group in sorted(set(events) | set(in_flight) | set(offsets)):
        journal = events.get(group, [])
        delivered = [e for e in journal if e.kind == DeliveryEvent.Kind.DELIVERED]
        last = journal[-1] if journal else None
        state = delivery_state(
            last_event=last.kind if last else None,
            invisible_until=in_flight.get(group),
            offset_passed=offsets.get(group, 0) > message.queue_offset,
            now=now,
            filtered_out=group in filtered,
        )
        out.append(
            GroupDelivery(
                consumer_group=group,
                state=state,
                deliveries=max((e.delivery_attempt for e in delivered), default=0),
                first_delivered_timestamp=delivered[0].timestamp if delivered else None,
                last_event=last.kind if last else None,
                last_event_timestamp=last.timestamp if last else None,
                invisible_until=in_flight.get(group),
            )
        )
    return out


def message_transaction_id(message: Message) -> str | None:
    """The transaction a message belongs to (its half message, committed copy or dead letter
    shares the transaction's id as its msg id), or None for a normal message."""
    return (
        Transaction.objects.filter(pk=message.msg_id).values_list("pk", flat=True).first()
        if message.msg_id
        else None
    )

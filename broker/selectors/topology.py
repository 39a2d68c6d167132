"""Reads behind the console's topics, producer groups and consumer groups pages.

More: docs/design.md, "Module notes", broker/selectors/topology.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Min, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from broker.constants import dlq_topic
from broker.models import (
    ConsumeQueue,
    ConsumerGroup,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    ProducerGroup,
    Topic,
    Transaction,
)
from broker.rules.states import TransactionState
from broker.selectors.queries import first_or_not_found


@dataclass(frozen=True)
class QueueOffsets:
    """One queue of a topic: ``min_offset`` (oldest stored queue offset) and ``max_offset``
    (the queue offset the next message receives)."""

    queue_id: int
    min_offset: int
    max_offset: int


@dataclass
class TopicRow:
    """A topic with its queues (by queue id) and ``messages``, the messages stored on them;
    ``message_type`` the type it accepts (``TopicMessageType``)."""

    name: str
    queue_nums: int
    system: bool
    created_timestamp: int
    message_type: str = "MIXED"
    queues: list[QueueOffsets] = field(default_factory=list)

    @property
    def messages(self) -> int:
        """Messages stored on the topic's queues (sum of max - min offsets)."""
        return sum(q.max_offset - q.min_offset for q in self.queues)


def topic_rows(*, include_system: bool = False) -> list[TopicRow]:
    """Every user topic (and the broker's own with ``include_system``), by name, with the
    min and max offsets of each of its queues. Two queries."""
    topics = Topic.objects.order_by("name")
    if not include_system:
        topics = topics.filter(system=False)
    rows = {
        t.name: TopicRow(t.name, t.queue_nums, t.system, t.created_timestamp, t.message_type)
        for t in topics
    }
    oldest = Message.objects.filter(
        topic=OuterRef("topic"), queue_id=OuterRef("queue_id")
    ).order_by("queue_offset")
    queues = (
        ConsumeQueue.objects.filter(topic__in=list(rows))
        .annotate(min_offset=Coalesce(Subquery(oldest.values("queue_offset")[:1]), "max_offset"))
        .order_by("topic", "queue_id")
        .values_list("topic", "queue_id", "min_offset", "max_offset")
    )
    for topic, queue_id, min_offset, max_offset in queues:
        rows[topic].queues.append(QueueOffsets(queue_id, min_offset, max_offset))
    return list(rows.values())


@dataclass(frozen=True)
class ProducerGroupRow:
    """A producer group, its back-check reachability and its transactions waiting: ``pending``
    (PREPARED) and ``discarded`` (DISCARDED, waiting for an operator)."""

    group: ProducerGroup
    pending: int
    discarded: int


def producer_group_rows() -> list[ProducerGroupRow]:
    """Every producer group by name, with its pending and discarded counts. Two queries."""
    counts: dict[tuple[str, str], int] = {
        (row["producer_group"], row["state"]): row["n"]
        for row in Transaction.objects.filter(
            state__in=[TransactionState.PREPARED, TransactionState.DISCARDED]
        )
        .values("producer_group", "state")
        .annotate(n=Count("*"))
        .order_by()
    }
    return [
        ProducerGroupRow(
            group=g,
            pending=counts.get((g.name, TransactionState.PREPARED), 0),
            discarded=counts.get((g.name, TransactionState.DISCARDED), 0),
        )
        for g in ProducerGroup.objects.order_by("name")
    ]


@dataclass(frozen=True)
class TopicLag:
    """A consumer group's lag on one topic: messages stored and not yet taken, summed over
    the topic's queues the group has an offset on."""

    topic: str
    lag: int


@dataclass(frozen=True)
class ConsumerGroupRow:
    """A consumer group with its lag per topic (by topic name), its deliveries taken and not
    yet acked (``in_flight``) and the messages on its dead-letter topic (``dlq``)."""

    group: ConsumerGroup
    lags: list[TopicLag]
    in_flight: int
    dlq: int

    @property
    def total_lag(self) -> int:
        """Lag summed over the group's topics."""
        return sum(t.lag for t in self.lags)


def consumer_group_rows() -> list[ConsumerGroupRow]:
    """Every consumer group by name with its lag per topic, in-flight deliveries and DLQ
    count. Four queries."""
    groups = list(ConsumerGroup.objects.order_by("name"))
    names = [g.name for g in groups]
    max_offset = ConsumeQueue.objects.filter(
        topic=OuterRef("topic"), queue_id=OuterRef("queue_id")
    ).values("max_offset")[:1]
    lags: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    offsets = (
        ConsumerOffset.objects.filter(consumer_group__in=names)
        .annotate(max_offset=Coalesce(Subquery(max_offset), "offset"))
        .values_list("consumer_group", "topic", "offset", "max_offset")
    )
    for group, topic, offset, queue_max in offsets:
        lags[group][topic] += max(0, queue_max - offset)
    in_flight = dict(
        Delivery.objects.filter(consumer_group__in=names)
        .values("consumer_group")
        .annotate(n=Count("*"))
        .order_by()
        .values_list("consumer_group", "n")
    )
    dlq = dict(
        ConsumeQueue.objects.filter(topic__in=[dlq_topic(n) for n in names])
        .values("topic")
        .annotate(n=Sum("max_offset"))
        .order_by()
        .values_list("topic", "n")
    )
    return [
        ConsumerGroupRow(
            group=g,
            lags=[TopicLag(t, n) for t, n in sorted(lags[g.name].items())],
            in_flight=in_flight.get(g.name, 0),
            dlq=dlq.get(dlq_topic(g.name), 0),
        )
        for g in groups
    ]


def dead_letters_by_group(since: int) -> dict[str, int]:
    """Messages dead-lettered (moved to ``%DLQ%{group}``) per consumer group since ``since``
    (ms), from the delivery journal through its partial index of dead letters; groups with
    none are absent."""
    rows = (
        DeliveryEvent.objects.filter(kind=DeliveryEvent.Kind.DEAD_LETTERED, timestamp__gte=since)
        .values("consumer_group")
        .annotate(n=Count("*"))
        .order_by()
        .values_list("consumer_group", "n")
    )
    return dict(rows)


def topic_list() -> QuerySet[Topic]:
    """User topics (not broker-owned ones), by name."""
    return Topic.objects.filter(system=False)


def topic_get(name: str) -> Topic:
    """A topic by name, system topics included.

    Raises:
        NotFound: ``topic_not_found``.
    """
    return first_or_not_found(Topic.objects.filter(name=name), "topic", name)


def user_topic_get(name: str) -> Topic:
    """A user topic (not a broker-owned one) by name.

    Raises:
        NotFound: ``topic_not_found``.
    """
    return first_or_not_found(Topic.objects.filter(name=name, system=False), "topic", name)


def producer_group_list() -> QuerySet[ProducerGroup]:
    """Every producer group, by name."""
    return ProducerGroup.objects.order_by("name")


def consumer_group_list() -> QuerySet[ConsumerGroup]:
    """Every consumer group, by name."""
    return ConsumerGroup.objects.order_by("name")


def consumer_group_get(name: str) -> ConsumerGroup:
    """A consumer group by name.

    Raises:
        NotFound: ``consumer_group_not_found``.
    """
    return first_or_not_found(ConsumerGroup.objects.filter(name=name), "consumer_group", name)


def producer_group_get(name: str) -> ProducerGroup:
    """A producer group by name.

    Raises:
        NotFound: ``producer_group_not_found``.
    """
    return first_or_not_found(ProducerGroup.objects.filter(name=name), "producer_group", name)


def topic_queue_offsets(topic: Topic) -> list[dict[str, int]]:
    """Each queue's ``min_offset`` (first stored queue offset) and ``max_offset`` (the next one),
    as RocketMQ's topic status: ``[{"queue_id", "min_offset", "max_offset"}]``."""
    maxima = dict(
        ConsumeQueue.objects.filter(topic=topic.name).values_list("queue_id", "max_offset")
    )
    minima = dict(
        Message.objects.filter(topic=topic.name)
        .values("queue_id")
        .annotate(m=Min("queue_offset"))
        .values_list("queue_id", "m")
    )
    return [
        {
            "queue_id": q,
            "min_offset": minima.get(q, maxima.get(q, 0)),
            "max_offset": maxima.get(q, 0),
        }
        for q in range(topic.queue_nums)
    ]

"""Every read the API, the console and the tasks make."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Min, Model, Q, QuerySet

from broker.errors import NotFoundKind, not_found
from broker.models import ConsumeQueue, ConsumerGroup, Message, ProducerGroup, Topic, Transaction
from broker.rules.topics import is_system_topic

_M = TypeVar("_M", bound=Model)


def first_or_not_found(queryset: QuerySet[_M], kind: NotFoundKind, name: str) -> _M:
    """The first row of ``queryset`` (at most one row: a lookup by a unique key).

    Raises:
        NotFound: ``<kind>_not_found`` naming ``name`` (``broker.errors.not_found``).
    """
    row = queryset.first()
    if row is None:
        raise not_found(kind, name)
    return row


def topic_list() -> QuerySet[Topic]:
    """User topics (not broker-owned ones), by name."""
    return Topic.objects.filter(system=False)


def topic_get(name: str) -> Topic:
    """A topic by name, system topics included.

    Raises:
        NotFound: ``topic_not_found``.
    """
    return first_or_not_found(Topic.objects.filter(name=name), "topic", name)


def producer_group_list() -> QuerySet[ProducerGroup]:
    """Every producer group, by name."""
    return ProducerGroup.objects.order_by("name")


def consumer_group_list() -> QuerySet[ConsumerGroup]:
    """Every consumer group, by name."""
    return ConsumerGroup.objects.order_by("name")


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


def message_get(msg_id: str, *, producer_groups: list[str] | None = None) -> Message:
    """The message with ``msg_id`` as consumers see it: the delivered copy on a user topic if
    there is one, else the newest stored message with that id (a half message, a DLQ copy).

    ``producer_groups`` None means any group (admin); otherwise only messages those groups sent.

    Raises:
        NotFound: ``message_not_found`` (also when it exists but belongs to another group).
    """
    qs = Message.objects.filter(msg_id=msg_id)
    if producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    messages = list(qs.order_by("commit_log_offset"))
    for message in messages:
        if not is_system_topic(message.topic):
            return message
    if messages:
        return messages[-1]
    raise not_found("message", msg_id)


def messages_by_key(
    *, topic: str, key: str, producer_groups: list[str] | None = None
) -> QuerySet[Message]:
    """Messages of ``topic`` whose space-separated ``keys`` contain ``key`` (RocketMQ
    queryMessage by key), oldest first."""
    qs = Message.objects.filter(topic=topic).filter(
        Q(keys=key)
        | Q(keys__startswith=f"{key} ")
        | Q(keys__endswith=f" {key}")
        | Q(keys__contains=f" {key} ")
    )
    if producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    return qs.order_by("commit_log_offset")


def transaction_get(transaction_id: str) -> Transaction:
    """A transaction by id, unlocked (a read; services lock with ``transaction_get_locked``).

    Raises:
        NotFound: ``transaction_not_found``.
    """
    return first_or_not_found(
        Transaction.objects.filter(pk=transaction_id), "transaction", transaction_id
    )


def transaction_list(
    *,
    state: str | None = None,
    producer_group: str | None = None,
    topic: str | None = None,
    producer_groups: list[str] | None = None,
) -> QuerySet[Transaction]:
    """Transactions, oldest first, filtered; ``producer_groups`` None means every group (admin),
    otherwise the caller's groups only."""
    qs = Transaction.objects.all()
    if state:
        qs = qs.filter(state=state)
    if producer_group:
        qs = qs.filter(producer_group=producer_group)
    if topic:
        qs = qs.filter(topic=topic)
    if producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    return qs.order_by("born_timestamp", "transaction_id")

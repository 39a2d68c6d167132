"""Every read the API, the console and the tasks make."""

from __future__ import annotations

from django.db.models import Min, Q, QuerySet

from broker.errors import NotFound
from broker.models import ConsumeQueue, Message, Topic, Transaction


def topic_list() -> QuerySet[Topic]:
    """User topics (not broker-owned ones), by name."""
    return Topic.objects.filter(system=False)


def topic_get(name: str) -> Topic:
    """A topic by name, system topics included.

    Raises:
        NotFound: ``topic_not_found``.
    """
    topic = Topic.objects.filter(name=name).first()
    if topic is None:
        raise NotFound(
            f"Topic {name} does not exist.", code="topic_not_found", details={"topic": name}
        )
    return topic


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
        if not message.topic.startswith(("RMQ_SYS_", "%", "TRANS_CHECK")):
            return message
    if messages:
        return messages[-1]
    raise NotFound(
        f"Message {msg_id} does not exist.", code="message_not_found", details={"msg_id": msg_id}
    )


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
    """Raises NotFound (``transaction_not_found``)."""
    tx = Transaction.objects.filter(pk=transaction_id).first()
    if tx is None:
        raise NotFound(
            f"Transaction {transaction_id} does not exist.",
            code="transaction_not_found",
            details={"transaction_id": transaction_id},
        )
    return tx


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

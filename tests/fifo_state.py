"""Helpers for the blocked message groups' tests: a FIFO consumer group with message groups
whose head has failed, made with the broker's own services (send, receive, change of invisible
duration). The messages' ``message_group`` is set on the stored rows, as a FIFO send stores it.

- ``fifo_group``: a consumer group marked FIFO (through ``save``, so the cached lookup drops it).
- ``send_group``: ``n`` messages of one message group on a one-queue topic, in send order.
- ``block_heads``: receive the heads, nack them (invisible duration 0) and receive them again:
  their message groups are then blocked.
"""

from __future__ import annotations

from broker.models import ConsumerGroup, Message, Topic
from broker.services.commitlog.messages import message_send
from broker.services.consumption.deliveries import delivery_invisible_change
from broker.services.consumption.receive import messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create

INVISIBLE = 60_000


def fifo_group(name: str, *, max_delivery_attempts: int = 16, topic: str = "Orders") -> None:
    """Create ``topic`` (one queue) if missing and the FIFO consumer group ``name``."""
    if not Topic.objects.filter(name=topic).exists():
        topic_create(name=topic, queue_nums=1)
    consumer_group_create(name=name, max_delivery_attempts=max_delivery_attempts)
    group = ConsumerGroup.objects.get(name=name)
    group.fifo = True
    group.save()


def send_group(message_group: str, n: int, *, topic: str = "Orders") -> list[Message]:
    """``n`` messages of ``message_group`` on ``topic``, with keys ``<group>-<i>``."""
    sent = []
    for i in range(n):
        m = message_send(
            topic=topic, body=f"{message_group} {i}".encode(), keys=f"{message_group}-{i}"
        )
        Message.objects.filter(pk=m.pk).update(message_group=message_group)
        m.message_group = message_group
        sent.append(m)
    return sent


def receive(group: str, *, topic: str = "Orders", n: int = 1) -> list:
    """One receive of at most ``n`` messages (the queue's first ones first)."""
    return messages_receive(
        consumer_group=group, topic=topic, max_messages=n, invisible_duration_ms=INVISIBLE
    )


def nack(group: str, received: list) -> None:
    """Make each of ``received`` visible again now (a PushConsumer's nack)."""
    for got in received:
        delivery_invisible_change(
            consumer_group=group, receipt_handle=got.receipt_handle, invisible_duration_ms=0
        )


def block_heads(group: str, *, topic: str = "Orders", n: int = 1, failures: int = 1) -> list:
    """Receive the first ``n`` messages of ``topic`` for ``group`` (send the message groups'
    heads first), then ``failures`` times nack them and receive them again (expired deliveries
    come first): they end in flight at attempt ``failures`` + 1, blocking their message groups.
    Returns the last hand-outs."""
    got = receive(group, topic=topic, n=n)
    for _ in range(failures):
        nack(group, got)
        got = receive(group, topic=topic, n=n)
    assert len(got) == n and {g.delivery_attempt for g in got} == {failures + 1}
    return got

"""Helpers of the back-check tests (fixtures are in ``conftest.py``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from django.db import connection

from broker.constants import CHECK_GROUP, HALF_TOPIC, OP_HALF_TOPIC
from broker.models import ConsumerOffset, Message, ProducerGroup, Transaction, TransactionEvent
from broker.services.topology.writes import producer_group_create
from tests.support import CheckServer, prepare

CONTRACT_FIELDS = {
    "transaction_id",
    "msg_id",
    "producer_group",
    "topic",
    "tags",
    "keys",
    "properties",
    "check_times",
    "commit_log_offset",
    "half_queue_offset",
    "born_timestamp",
}
"""Every field of a back-check body of api-v1, besides ``body`` or ``body_base64``."""

INTERVAL = 30_000  # HALFMOON_TRANSACTION_CHECK_INTERVAL_MS default


def url_group(name: str, url: str, server: CheckServer | None = None) -> ProducerGroup:
    """A producer group answering checks at ``url``; ``server`` learns its secret."""
    group = producer_group_create(name=name, check_url=url)
    if server is not None:
        server.secrets[name] = group.check_secret
    return group


def prepare_many(group: str, count: int) -> list[Transaction]:
    """``count`` PREPARED transactions of ``group``, born in this order."""
    return [prepare(producer_group=group, body=f"{group} {i}") for i in range(count)]


def by_group(jobs) -> Counter:
    """How many check jobs went to each producer group."""
    return Counter(job.producer_group for job in jobs)


def journal(kind: str, group: str | None = None):
    """The check journal's events of ``kind`` (of ``group``'s transactions)."""
    events = TransactionEvent.objects.filter(kind=kind)
    if group is not None:
        events = events.filter(
            transaction_id__in=Transaction.objects.filter(producer_group=group).values("pk")
        )
    return events


def group_row(name: str) -> ProducerGroup:
    return ProducerGroup.objects.get(name=name)


def refreshed(tx: Transaction) -> Transaction:
    tx.refresh_from_db()
    return tx


def delivered_copies(tx: Transaction) -> list[Message]:
    """The messages delivered on the transaction's real topic (a commit stores one)."""
    return list(Message.objects.filter(topic=tx.topic, msg_id=tx.transaction_id))


def checkpoints() -> tuple[int, int]:
    """The (half, Op) scan checkpoints of half queue 0."""
    rows = dict(
        ConsumerOffset.objects.filter(consumer_group=CHECK_GROUP, queue_id=0).values_list(
            "topic", "offset"
        )
    )
    return rows[HALF_TOPIC], rows[OP_HALF_TOPIC]


def run_in_threads(work: Callable[[], object], threads: int, timeout_s: float = 60) -> None:
    """Run ``work`` in ``threads`` threads at once (started together at a barrier), each with
    its own database connection; raise the first error any of them met."""
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            work()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    running = [threading.Thread(target=run) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join(timeout_s)
    assert not errors, errors

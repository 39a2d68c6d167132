"""A broker history for the archive and prune tests, written by the broker's own services, and
the helpers to move it back in time and to read an archive back.

``broker_round`` runs one round of everything the logs hold: a producer commit delivered to two
consumer groups (one acks at once, one after a redelivery), a rollback, a checked transaction
discarded and then committed too late (refused, journalled ``end_refused``), a dead-lettered
delivery, a PREPARED transaction, a normal message, and the Op messages. ``logs_age`` moves every
row's times back, so rounds land in different archive segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.db.models import F

from broker.conf import conf
from broker.errors import TransactionAlreadyResolved
from broker.models import (
    Delivery,
    DeliveryEvent,
    Message,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.pipeline.archive_io import table_read
from broker.pipeline.schema import ARCHIVE_TABLES, SORT_COLUMNS
from broker.rules.states import DiscardReason
from broker.services.checks.outcomes import check_delivered_record
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import (
    consumer_group_create,
    producer_group_create,
    topic_create,
)
from broker.services.transactions.end import transaction_end, transaction_get_locked
from broker.services.transactions.op_messages import op_flush
from broker.services.transactions.resolution import transaction_discard
from tests.support import prepare

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def broker_setup() -> None:
    """Topic TranTest (2 queues), producer group G (polls), consumer groups C1, C2 and D (D
    dead-letters after one attempt)."""
    topic_create(name="TranTest", queue_nums=2)
    producer_group_create(name="G", check_url=None)
    consumer_group_create(name="C1")
    consumer_group_create(name="C2")
    consumer_group_create(name="D", max_delivery_attempts=1)


def _receive(group: str) -> list[Any]:
    return messages_receive(
        consumer_group=group, topic="TranTest", max_messages=32, invisible_duration_ms=60_000
    )


def _expire(group: str) -> None:
    Delivery.objects.filter(consumer_group=group).update(invisible_until_timestamp=0)


@dataclass
class Round:
    """The transaction ids of one ``broker_round``, by what happened to them."""

    committed: str
    rolled_back: str
    discarded: str
    prepared: str


def broker_round(tag: str) -> Round:
    """One round of broker life (see the module docstring); ``tag`` names its keys."""
    committed = prepare(keys=f"{tag}-commit")
    transaction_end(transaction_id=committed.pk, producer_group="G", action="commit")
    rolled_back = prepare(keys=f"{tag}-rollback")
    transaction_end(transaction_id=rolled_back.pk, producer_group="G", action="rollback")
    discarded = prepare(keys=f"{tag}-discard")
    with transaction.atomic():
        check_delivered_record(
            transaction_id=discarded.pk,
            producer_group="G",
            channel="poll",
            now=discarded.born_timestamp + 1,
            detail={},
        )
        transaction_discard(transaction_get_locked(discarded.pk), reason=DiscardReason.CHECK_MAX)
    with pytest.raises(TransactionAlreadyResolved):
        transaction_end(transaction_id=discarded.pk, producer_group="G", action="commit")
    prepared = prepare(keys=f"{tag}-pending")
    message_send(topic="TranTest", body=f"{tag} normal".encode(), keys=f"{tag}-normal")
    for half_queue_id in range(conf.half_queue_nums):
        op_flush(half_queue_id=half_queue_id, force=True)

    messages_ack(consumer_group="C1", receipt_handles=[r.receipt_handle for r in _receive("C1")])
    _receive("C2")
    _expire("C2")
    messages_ack(consumer_group="C2", receipt_handles=[r.receipt_handle for r in _receive("C2")])
    _receive("D")
    _expire("D")
    _receive("D")  # past max_delivery_attempts: to %DLQ%D
    return Round(committed.pk, rolled_back.pk, discarded.pk, prepared.pk)


def logs_age(ms: int) -> None:
    """Move every row's times ``ms`` into the past (the logs and the derived rows alike)."""
    Message.objects.update(
        store_timestamp=F("store_timestamp") - ms, born_timestamp=F("born_timestamp") - ms
    )
    Resolution.objects.update(resolved_timestamp=F("resolved_timestamp") - ms)
    TransactionEvent.objects.update(timestamp=F("timestamp") - ms)
    DeliveryEvent.objects.update(timestamp=F("timestamp") - ms)
    Transaction.objects.update(
        born_timestamp=F("born_timestamp") - ms,
        resolved_timestamp=F("resolved_timestamp") - ms,
        next_check_timestamp=F("next_check_timestamp") - ms,
        last_check_timestamp=F("last_check_timestamp") - ms,
    )


def archive_rows(spark: Any, uri: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every archive table under ``uri``, as tuples sorted by the table's sort
    columns (then whole rows), for comparing two archives."""
    out = {}
    for table in ARCHIVE_TABLES:
        rows = table_read(spark, uri=uri, table=table).collect()
        key = SORT_COLUMNS[table]
        out[table] = sorted(
            (tuple(r) for r in rows),
            key=lambda r, key=key, names=[c for c, _ in ARCHIVE_TABLES[table]]: (
                tuple(r[names.index(c)] for c in key),
                repr(r),
            ),
        )
    return out

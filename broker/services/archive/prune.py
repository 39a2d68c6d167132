"""The prune: what the hot database may forget once it is archived (RocketMQ deletes commit log
files past ``fileReservedTime``; Halfmoon deletes rows, only those that are archived and final).

More: docs/design.md, "Module notes", broker/services/archive/prune.py."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.deletion import ProtectedError

from broker.conf import conf
from broker.constants import CHECK_GROUP, CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from broker.models import (
    CheckRequest,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.rules.clock import now_ms as clock_ms
from broker.rules.op_body import op_body_parse
from broker.rules.states import RESOLVED_STATES, TransactionState
from broker.selectors.metrics import EVENTS, RESOLUTIONS, watermark
from broker.services.archive.watermark import archived_until_or_none, pruned_until_advance
from broker.services.metrics import metrics_fold

logger = logging.getLogger("halfmoon.archive")

TRANSACTION_BATCH = 500  # transactions per database transaction: 7 deletes, ~2,500 rows
MESSAGE_BATCH = 2000  # messages or delivery journal rows per delete
OP_BATCH = 32  # Op messages read at a time (bodies of at most HALFMOON_OP_MSG_MAX_SIZE)

_TRANSACTION_TOPICS = (HALF_TOPIC, CHECK_MAX_TIME_TOPIC)
_SYSTEM_TOPICS = (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TIME_TOPIC)


def prune_bound(*, archived_until_ms: int, now_ms: int, file_reserved_ms: int) -> int:
    """The time (ms) below which archived, final rows may be deleted: archived
    (``archived_until_ms``) and older than the reserved time (HALFMOON_FILE_RESERVED_HOURS)."""
    return min(archived_until_ms, now_ms - file_reserved_ms)


def archive_prune(*, now_ms: int | None = None) -> dict[str, int]:
    """Delete what is archived, final and older than the reserved time (see the module
    docstring), and record ``pruned_until_timestamp``.

    Args:
        now_ms: the time the reserved time counts back from (default the clock).

    Returns:
        rows deleted per model label (``{"broker.Message": n, "broker.Transaction": n, ...}``);
        empty when nothing is archived yet.
    """
    now = clock_ms() if now_ms is None else now_ms
    archived_until = archived_until_or_none()
    if archived_until is None:
        return {}
    bound = prune_bound(
        archived_until_ms=archived_until,
        now_ms=now,
        file_reserved_ms=conf.file_reserved_ms,
    )
    if bound <= 0:
        return {}
    metrics_fold()
    counts: Counter[str] = Counter()
    _transactions_prune(bound, counts)
    _op_messages_prune(bound, counts)
    _messages_prune(bound, counts)
    _delivery_events_prune(bound, counts)
    pruned_until_advance(bound)
    if counts:
        logger.info("pruned below %d: %s", bound, dict(counts))
    return dict(counts)


def prunable_transactions(bound: int) -> QuerySet[Transaction]:
    """The transactions whose rows may all go (see the module docstring): final, every row of
    them stored before ``bound`` (ms), the delivered message not in flight, the journal rows
    folded into the ``/metrics`` rollup. The subqueries read the indexes on msg_id,
    ``(transaction_id, timestamp)``, ``prepared_transaction_offset`` and the primary keys."""
    folded_events, folded_resolutions = watermark(EVENTS), watermark(RESOLUTIONS)
    late_event = TransactionEvent.objects.filter(transaction_id=OuterRef("pk")).filter(
        Q(timestamp__gte=bound) | Q(pk__gt=folded_events)
    )
    late_message = Message.objects.filter(
        msg_id=OuterRef("pk"), topic__in=_TRANSACTION_TOPICS, store_timestamp__gte=bound
    )
    delivered_held = Message.objects.filter(
        prepared_transaction_offset=OuterRef("half_commit_log_offset")
    ).filter(
        Q(store_timestamp__gte=bound) | Exists(Delivery.objects.filter(message=OuterRef("pk")))
    )
    late_op = Message.objects.filter(
        pk=OuterRef("resolution__op_commit_log_offset"), store_timestamp__gte=bound
    )
    resolved = Q(
        state__in=RESOLVED_STATES,
        resolution__op_commit_log_offset__isnull=False,
        resolution__resolved_timestamp__lt=bound,
        resolution__pk__lte=folded_resolutions,
    )
    return Transaction.objects.filter(
        resolved | Q(state=TransactionState.DISCARDED),
        resolved_timestamp__lt=bound,
    ).filter(~Exists(late_event), ~Exists(late_message), ~Exists(delivered_held), ~Exists(late_op))


def _transactions_prune(bound: int, counts: Counter[str]) -> None:
    """Prune the prunable transactions in batches, oldest end first (keyset on the index of
    ``resolved_timestamp``, so a transaction held back is read once per prune)."""
    for ids in _keyset_pages(
        lambda: prunable_transactions(bound), "resolved_timestamp", TRANSACTION_BATCH
    ):
        _delete_batch(_transactions_delete, ids, bound, counts)


def _keyset_pages(
    candidates: Callable[[], QuerySet[Any]], time_field: str, size: int
) -> Iterator[list[Any]]:
    """The primary keys of ``candidates()`` in pages of at most ``size``, by ``(time_field,
    pk)``: each page is read after the previous one was handled, from where it ended, so rows
    left in place are not read again."""
    after: tuple[int, Any] | None = None
    while True:
        page = candidates()
        if after is not None:
            page = page.filter(
                Q(**{f"{time_field}__gt": after[0]})
                | Q(**{time_field: after[0], "pk__gt": after[1]})
            )
        rows = list(page.order_by(time_field, "pk").values_list(time_field, "pk")[:size])
        if not rows:
            return
        after = rows[-1]
        yield [pk for _, pk in rows]
        if len(rows) < size:
            return


def _delete_batch(
    delete: Callable[[list[Any], int], Mapping[str, int]],
    ids: list[Any],
    bound: int,
    counts: Counter[str],
) -> None:
    """Run ``delete(ids, bound)`` (returning ``{model label: rows}``) in one database
    transaction. A consumer that took one of the messages meanwhile (its ``Delivery`` refers
    to it) undoes the whole batch: it is tried again at the next prune."""
    try:
        with transaction.atomic():
            counts.update(delete(ids, bound))
    except (IntegrityError, ProtectedError) as exc:
        logger.info("prune batch of %d left for the next prune: %s", len(ids), exc)


def _transactions_delete(ids: list[str], bound: int) -> Counter[str]:
    """Lock the transactions ``ids`` that are still prunable (``SKIP LOCKED``: an operator or
    a late end holding one keeps it) and delete them with every row they are derived from."""
    locked = list(
        prunable_transactions(bound)
        .filter(pk__in=ids)
        .select_for_update(skip_locked=True, of=("self",))
        .values_list("pk", "half_commit_log_offset")
    )
    if not locked:
        return Counter()
    tids = [pk for pk, _ in locked]
    deleted: Counter[str] = Counter()
    for qs in (
        Message.objects.filter(prepared_transaction_offset__in=[h for _, h in locked]),
        Message.objects.filter(msg_id__in=tids, topic__in=_TRANSACTION_TOPICS),
        CheckRequest.objects.filter(transaction_id__in=tids),
        TransactionEvent.objects.filter(transaction_id__in=tids),
        Resolution.objects.filter(transaction_id__in=tids),
        Transaction.objects.filter(pk__in=tids),
    ):
        deleted.update(_delete(qs))
    return deleted


def _delete(qs: QuerySet[Any]) -> dict[str, int]:
    """Delete ``qs``, reading only the primary keys of what it deletes (never a body)."""
    return qs.only("pk").delete()[1]


def _op_messages_prune(bound: int, counts: Counter[str]) -> None:
    """Delete the Op messages stored before ``bound`` below each Op queue's scan checkpoint
    whose named half queue offsets all lie where no half message is left."""
    checkpoints = ConsumerOffset.objects.filter(
        consumer_group=CHECK_GROUP, topic=OP_HALF_TOPIC
    ).values_list("queue_id", "offset")
    for queue_id, checkpoint in checkpoints:
        after = -1
        while True:
            page = list(
                Message.objects.filter(
                    topic=OP_HALF_TOPIC,
                    queue_id=queue_id,
                    queue_offset__gt=after,
                    queue_offset__lt=checkpoint,
                    store_timestamp__lt=bound,
                )
                .order_by("queue_offset")
                .values_list("commit_log_offset", "queue_offset", "body")[:OP_BATCH]
            )
            if not page:
                break
            after = page[-1][1]
            gone = _op_messages_done(queue_id, {clo: body for clo, _, body in page})
            if gone:
                _delete_batch(_messages_delete, gone, bound, counts)
            if len(page) < OP_BATCH:
                break


def _op_messages_done(half_queue_id: int, bodies: dict[int, Any]) -> list[int]:
    """Of the Op messages ``bodies`` ({commit log offset: body}) of one half queue, those none
    of whose named half queue offsets still has a half message (one index range read)."""
    named = {clo: set(op_body_parse(body).offsets) for clo, body in bodies.items()}
    every = set().union(*named.values())
    if not every:
        return list(named)
    alive = set(
        Message.objects.filter(
            topic=HALF_TOPIC,
            queue_id=half_queue_id,
            queue_offset__gte=min(every),
            queue_offset__lte=max(every),
        ).values_list("queue_offset", flat=True)
    )
    return [clo for clo, offsets in named.items() if not offsets & alive]


def _messages_delete(ids: list[int], bound: int) -> dict[str, int]:
    return _delete(Message.objects.filter(pk__in=ids, store_timestamp__lt=bound))


def prunable_messages(bound: int) -> QuerySet[Message]:
    """Messages other than half, Op and discard copies stored before ``bound`` (ms) that no
    consumer group has in flight and, when delivered from a half message, whose transaction
    is gone."""
    in_flight = Exists(Delivery.objects.filter(message=OuterRef("pk")))
    transaction_left = Q(prepared_transaction_offset__isnull=False) & Exists(
        Transaction.objects.filter(pk=OuterRef("msg_id"))
    )
    return (
        Message.objects.filter(store_timestamp__lt=bound)
        .exclude(topic__in=_SYSTEM_TOPICS)
        .exclude(in_flight)
        .exclude(transaction_left)
    )


def _messages_prune(bound: int, counts: Counter[str]) -> None:
    """Prune ``prunable_messages`` in batches, by store time (keyset on its index)."""
    for ids in _keyset_pages(lambda: prunable_messages(bound), "store_timestamp", MESSAGE_BATCH):
        _delete_batch(_prunable_messages_delete, ids, bound, counts)


def _prunable_messages_delete(ids: list[int], bound: int) -> dict[str, int]:
    return _delete(prunable_messages(bound).filter(pk__in=ids))


def _delivery_events_prune(bound: int, counts: Counter[str]) -> None:
    """Delete the delivery journal rows written before ``bound``, in batches."""
    while True:
        ids = list(
            DeliveryEvent.objects.filter(timestamp__lt=bound)
            .order_by("timestamp")
            .values_list("pk", flat=True)[:MESSAGE_BATCH]
        )
        if not ids:
            return
        counts.update(DeliveryEvent.objects.filter(pk__in=ids).delete()[1])
        if len(ids) < MESSAGE_BATCH:
            return

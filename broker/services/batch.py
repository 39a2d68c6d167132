"""Batches: many half messages, ends or normal messages in one request and one database
transaction (api-v1 "Batches"; RocketMQ's batch send, ``DefaultMQProducer.send(Collection)``).

Each item goes through the single operation's own service (``transaction_prepare``,
``transaction_end``, ``message_send``): the rules of a send or an end live there only. Each of
those services writes inside its own ``transaction.atomic()``, which inside the batch's
transaction is a savepoint: an item that fails leaves nothing of itself and undoes none of
the others. Its ``HalfmoonError`` becomes that item's outcome; any other error (the database
gone) fails the whole batch and nothing of it is stored.

Lock order, so that two batches never deadlock each other (nor a batch and a single call):

- sends hold the offset counter of each queue they append to (``broker.services.storage``)
  until the batch commits; a batch takes every counter it may need first, in
  ``(topic, queue_id)`` order (``_queue_counters_lock``);
- ends lock their transaction rows in transaction id order, then resolve them in the
  ``(real topic, queue, id)`` order the check outcomes use (``checks.outcomes.resolution_lock_order``),
  so the real queues' counters are also taken in one order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import Q

from broker.conf import conf
from broker.constants import HALF_TOPIC
from broker.errors import HalfmoonError, InvalidInput
from broker.models import ConsumeQueue, Message, Transaction
from broker.rules.topics import is_system_topic
from broker.services.checks.outcomes import resolution_lock_order
from broker.services.messages import message_send
from broker.services.storage import new_msg_id
from broker.services.transactions import half_queue_select, transaction_end, transaction_prepare

T = TypeVar("T")

BatchItem = dict[str, Any] | Exception
"""One item of a batch as the API hands it over: the keyword arguments of the single
operation's service, or the error already found for that item alone (bad input, forbidden)."""


def batch_size_check(count: int) -> None:
    """Refuse a batch of ``count`` items unless 1 <= count <= ``HALFMOON_BATCH_MAX_MESSAGES``.

    Raises:
        InvalidInput: ``batch_empty`` (no item) or ``batch_too_large`` (more than the
            setting), ``details`` ``{"count", "max_messages"}``; nothing of the batch is stored.
    """
    limit = conf.batch_max_messages
    details = {"count": count, "max_messages": limit}
    if count < 1:
        raise InvalidInput("A batch needs at least one item.", code="batch_empty", details=details)
    if count > limit:
        raise InvalidInput(
            f"A batch holds at most {limit} items; this one has {count}.",
            code="batch_too_large",
            details=details,
        )


def _queue_counters_lock(condition: Q) -> None:
    """Lock the offset counters (``ConsumeQueue`` rows) matching ``condition`` in
    ``(topic, queue_id)`` order, until the current database transaction ends."""
    list(
        ConsumeQueue.objects.select_for_update()
        .filter(condition)
        .order_by("topic", "queue_id")
        .values_list("pk", flat=True)
    )


def _run(
    items: Sequence[BatchItem],
    service: Callable[..., T],
    order: Sequence[int] | None = None,
) -> list[T | Exception]:
    """Call ``service(**item)`` for each item that is not already an error, in ``order``
    (indexes; default the items' order), inside the caller's database transaction; return one
    outcome per item in the items' order: the service's result or the ``HalfmoonError`` it
    raised."""
    outcomes: list[T | Exception] = list(items)  # errors stay; the rest are replaced below
    for index in order if order is not None else range(len(items)):
        item = items[index]
        if isinstance(item, Exception):
            continue
        try:
            outcomes[index] = service(**item)
        except HalfmoonError as exc:
            outcomes[index] = exc
    return outcomes


def transaction_prepare_batch(
    *, sends: Sequence[BatchItem]
) -> list[tuple[Transaction, bool] | Exception]:
    """Store the half messages of ``sends`` (``transaction_prepare``'s keyword arguments, or an
    item's error) in one database transaction (api-v1 ``POST /transactions/batch``).

    A send without ``msg_id`` is given a new one (``new_msg_id``) first, so that its half queue
    is known and locked before anything is written; idempotency by ``msg_id`` is
    ``transaction_prepare``'s (the same id again, in this batch or an earlier one: the stored
    transaction, ``created`` False).

    Returns:
        per item, in order: ``(transaction, created)``, or the error of that item
        (``NotFound``, ``Forbidden``, ``Conflict``, ``InvalidInput``, ``TooLarge``, or the one
        handed in).

    Raises:
        InvalidInput: ``batch_empty``, ``batch_too_large`` (``batch_size_check``); nothing stored.
    """
    batch_size_check(len(sends))
    items: list[BatchItem] = [
        item
        if isinstance(item, Exception) or item.get("msg_id")
        else {**item, "msg_id": new_msg_id()}
        for item in sends
    ]
    half_queues = sorted(
        {half_queue_select(item["msg_id"]) for item in items if not isinstance(item, Exception)}
    )
    with transaction.atomic():
        _queue_counters_lock(Q(topic=HALF_TOPIC, queue_id__in=half_queues))
        return _run(items, transaction_prepare)


def message_send_batch(*, sends: Sequence[BatchItem]) -> list[Message | Exception]:
    """Store the normal messages of ``sends`` (``message_send``'s keyword arguments, or an
    item's error) in one database transaction (api-v1 ``POST /messages/batch``). Every queue of
    the user topics named is locked first: a message's queue is chosen from its msg_id, made
    inside ``message_send``.

    Returns:
        per item, in order: the stored ``Message``, or the error of that item.

    Raises:
        InvalidInput: ``batch_empty``, ``batch_too_large``; nothing stored.
    """
    batch_size_check(len(sends))
    topics = sorted(
        {
            item["topic"]
            for item in sends
            if not isinstance(item, Exception) and not is_system_topic(item["topic"])
        }
    )
    with transaction.atomic():
        _queue_counters_lock(Q(topic__in=topics))
        return _run(sends, message_send)


def transaction_end_batch(*, ends: Sequence[BatchItem]) -> list[Transaction | Exception]:
    """End the transactions of ``ends`` (``transaction_end``'s keyword arguments:
    ``transaction_id``, ``producer_group``, ``action``, ``from_transaction_check``, ``remark``;
    or an item's error) in one database transaction (api-v1 ``POST /transactions/end-batch``).

    The transaction rows are locked in id order first; the ends then run through
    ``transaction_end`` (the one end rule) in ``(real topic, queue, id)`` order, and items for
    the same transaction in the order given. A refused end is journalled as the single end
    journals it, and kept when the batch commits.

    Returns:
        per item, in order: the transaction after its end, or the error of that item
        (``NotFound``, ``Forbidden``, ``TransactionAlreadyResolved``, ``InvalidInput``).

    Raises:
        InvalidInput: ``batch_empty``, ``batch_too_large``; nothing changed.
    """
    batch_size_check(len(ends))
    ids = sorted({e["transaction_id"] for e in ends if not isinstance(e, Exception)})
    with transaction.atomic():
        locked = {
            tx.pk: tx
            for tx in Transaction.objects.select_for_update().filter(pk__in=ids).order_by("pk")
        }

        def order_key(index: int) -> tuple[str, int, str]:
            item = ends[index]
            if isinstance(item, Exception):
                return ("", -1, "")
            tx = locked.get(item["transaction_id"])
            return resolution_lock_order(tx) if tx is not None else ("", -1, item["transaction_id"])

        order = sorted(range(len(ends)), key=order_key)
        return _run(ends, transaction_end, order)

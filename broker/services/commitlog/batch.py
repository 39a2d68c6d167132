"""Batches: many half messages, ends or normal messages in one request and one database
transaction (api-v1 "Batches"; RocketMQ's batch send, ``DefaultMQProducer.send(Collection)``).

More: docs/design.md, "Module notes", broker/services/commitlog/batch.py."""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from broker.conf import conf
from broker.constants import HALF_TOPIC, TIMER_TOPIC
from broker.errors import HalfmoonError, InvalidInput
from broker.models import ConsumeQueue, Message, ScheduledMessage, Transaction
from broker.rules.clock import now_ms
from broker.rules.states import RESOLVING_ACTIONS
from broker.services.commitlog.messages import message_plan
from broker.services.commitlog.storage import messages_store, new_msg_id
from broker.services.timers.schedule import delivery_timestamp_of, message_send_timed
from broker.services.transactions.end import end_resolved_by, transaction_end
from broker.services.transactions.half import (
    HalfPlan,
    transaction_plan,
    transaction_prepare,
    transactions_store,
)
from broker.services.transactions.resolution import PreparedEnd, transactions_resolve_prepared

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


def _run(items: Sequence[BatchItem], service: Callable[..., T]) -> list[T | Exception]:
    """Call ``service(**item)`` for each item that is not already an error, in order, inside
    the caller's database transaction; return one outcome per item: the service's result or
    the ``HalfmoonError`` it raised (or the item's own error)."""
    outcomes: list[T | Exception] = []
    for item in items:
        if isinstance(item, Exception):
            outcomes.append(item)
            continue
        try:
            outcomes.append(service(**item))
        except HalfmoonError as exc:
            outcomes.append(exc)
    return outcomes


def transaction_prepare_batch(
    *, sends: Sequence[BatchItem]
) -> list[tuple[Transaction, bool] | Exception]:
    """Store the half messages of ``sends`` (``transaction_prepare``'s keyword arguments, or an
    item's error) in one database transaction (api-v1 ``POST /transactions/batch``).

    Each item is checked and built by ``transaction_plan`` (the rules of a send; a send without
    ``msg_id`` is given a new one). A batch of distinct msg_ids is stored in one statement
    (``transactions_store``), tried first as the single send tries its insert, with no read
    before it. When that statement meets a stored msg_id (a retry, or a concurrent send), or the
    batch names a msg_id twice, the new msg_ids, each once in the batch, are stored together and
    the others go one by one through ``transaction_prepare``, in the items' order: a msg_id
    stored already (answered with the stored transaction, ``created`` False, or 409
    ``duplicate_msg_id`` for another group's), a msg_id twice in the batch (the second answers
    the first), and every item if the statement met a concurrent send of one of its msg_ids.

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
    outcomes: list[Any] = list(items)
    plans: dict[int, HalfPlan] = {}
    for index, item in enumerate(items):
        if isinstance(item, Exception):
            continue
        try:
            plans[index] = transaction_plan(**item)
        except HalfmoonError as exc:
            outcomes[index] = exc
    times = Counter(plan.tx.transaction_id for plan in plans.values())
    if len(times) == len(plans):  # the common batch: one statement, its own transaction
        try:
            transactions_store(list(plans.values()))
        except IntegrityError:  # a msg_id stored already or concurrently: item by item
            pass
        else:
            for index, plan in plans.items():
                outcomes[index] = (plan.tx, True)
            return outcomes
    stored = set(Transaction.objects.filter(pk__in=list(times)).values_list("pk", flat=True))
    fresh = [i for i, p in plans.items() if times[p.tx.transaction_id] == 1]
    fresh = [i for i in fresh if plans[i].tx.transaction_id not in stored]
    half_queues = sorted({plan.tx.half_queue_id for plan in plans.values()})
    with transaction.atomic():
        _queue_counters_lock(Q(topic=HALF_TOPIC, queue_id__in=half_queues))
        try:
            transactions_store([plans[i] for i in fresh])  # a savepoint in this transaction
        except IntegrityError:
            fresh = []
        for index in fresh:
            outcomes[index] = (plans[index].tx, True)
        done = set(fresh)
        rest = [i for i in plans if i not in done]
        for index, outcome in zip(
            rest, _run([items[i] for i in rest], transaction_prepare), strict=True
        ):
            outcomes[index] = outcome
    return outcomes


def _one_by_one(item: dict[str, Any]) -> bool:
    """An item of a normal message batch that goes through the single send: one with its own
    ``msg_id`` (idempotent per msg_id) or a delivery time (``deliver_at``, ``delay_level``)."""
    return any(item.get(name) is not None for name in ("msg_id", "deliver_at", "delay_level"))


def _msg_ids_lock(msg_ids: Sequence[str]) -> None:
    """Take the single send's advisory lock of each of ``msg_ids`` (``message_send``), in the
    order given (sorted by the caller), until the current database transaction ends."""
    if msg_ids:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(hashtextextended(m, 0))) "
                "FROM unnest(%s::text[]) AS m",
                [list(msg_ids)],
            )


def message_send_batch(
    *, sends: Sequence[BatchItem]
) -> list[Message | ScheduledMessage | Exception]:
    """Store the normal messages of ``sends`` (``message_send_timed``'s keyword arguments, or
    an item's error) in one database transaction (api-v1 ``POST /messages/batch``). Each item
    is checked and built by ``message_plan`` (the rules of a send); an item that fails them is
    answered alone. The items without ``msg_id``, ``deliver_at`` or ``delay_level`` are stored
    by one statement (``messages_store``); the others go through ``message_send_timed`` one by
    one (idempotent per msg_id; scheduled when due later), in the same database transaction,
    after their msg_ids' locks (sorted) and their queues' counters (``(topic, queue_id)``
    order) are taken, the order every writer takes.

    Returns:
        per item, in order: the stored ``Message`` (or the ``ScheduledMessage`` of one that
        waits for its time), or the error of that item.

    Raises:
        InvalidInput: ``batch_empty``, ``batch_too_large``; nothing stored.
        LookupError: a topic's queue does not exist; nothing stored.
    """
    batch_size_check(len(sends))
    outcomes: list[Any] = list(sends)
    singles: dict[int, dict[str, Any]] = {}
    queues: set[tuple[str, int]] = set()
    for index, item in enumerate(sends):
        if isinstance(item, Exception):
            continue
        single = _one_by_one(item)
        if single and item.get("msg_id") is None:  # its queue known now, from its msg_id
            item = {**item, "msg_id": new_msg_id()}
        timed = item.get("deliver_at") is not None or item.get("delay_level") is not None
        untimed = {k: v for k, v in item.items() if k not in ("deliver_at", "delay_level")}
        try:
            due = (
                delivery_timestamp_of(
                    deliver_at=item.get("deliver_at"),
                    delay_level=item.get("delay_level"),
                    now=now_ms(),
                )
                if timed
                else None
            )
            planned = message_plan(**untimed, delivery_timestamp=due)
        except HalfmoonError as exc:
            outcomes[index] = exc
            continue
        if not single:
            outcomes[index] = planned
            continue
        singles[index] = item
        queues.add((planned.topic, planned.queue_id))
        if timed:
            queues.add((TIMER_TOPIC, 0))
    bulk = [outcome for outcome in outcomes if isinstance(outcome, Message)]
    if not singles:
        messages_store(bulk)
        return outcomes
    with transaction.atomic():
        _msg_ids_lock(sorted({item["msg_id"] for item in singles.values()}))
        queues |= {(message.topic, message.queue_id) for message in bulk}
        _queue_counters_lock(
            functools.reduce(operator.or_, (Q(topic=t, queue_id=q) for t, q in sorted(queues)))
        )
        messages_store(bulk)
        for index, outcome in zip(
            singles, _run(list(singles.values()), message_send_timed), strict=True
        ):
            outcomes[index] = outcome
    return outcomes


def transaction_end_batch(*, ends: Sequence[BatchItem]) -> list[Transaction | Exception]:
    """End the transactions of ``ends`` (``transaction_end``'s keyword arguments:
    ``transaction_id``, ``producer_group``, ``action``, ``from_transaction_check``, ``remark``;
    or an item's error) (api-v1 ``POST /transactions/end-batch``).

    The commits and rollbacks of PREPARED transactions of the right group (the first item of
    each transaction) are written together in one statement, its own database transaction
    (``transactions_resolve_prepared``: rows locked in id order, then the real queues'
    counters in ``(topic, queue_id)`` order). Every other item is then answered as the single
    end answers it (``transaction_end``, each its own database transaction), in the items'
    order: an unknown end, an end of a transaction not PREPARED or of another group, a second
    item of the same transaction. A refused end is journalled as the single end journals it.

    Returns:
        per item, in order: the transaction after its end, or the error of that item
        (``NotFound``, ``Forbidden``, ``TransactionAlreadyResolved``, ``InvalidInput``).

    Raises:
        InvalidInput: ``batch_empty``, ``batch_too_large``; nothing changed.
    """
    batch_size_check(len(ends))
    outcomes: list[Any] = list(ends)
    first: dict[str, int] = {}
    for index, item in enumerate(ends):
        if not isinstance(item, Exception):
            first.setdefault(item["transaction_id"], index)
    asked = {
        index: PreparedEnd(
            transaction_id=ends[index]["transaction_id"],
            producer_group=ends[index]["producer_group"],
            action=ends[index]["action"],
            resolved_by=end_resolved_by(ends[index].get("from_transaction_check", False)),
            reason=ends[index].get("remark") or "",
        )
        for index in first.values()
        if ends[index]["action"] in RESOLVING_ACTIONS
    }
    resolved = transactions_resolve_prepared(list(asked.values()))
    for index, end in asked.items():
        if end.transaction_id in resolved:
            outcomes[index] = resolved[end.transaction_id]
    rest = [
        i
        for i, item in enumerate(ends)
        if not isinstance(item, Exception)
        and (i not in asked or asked[i].transaction_id not in resolved)
    ]
    for index, outcome in zip(rest, _run([ends[i] for i in rest], transaction_end), strict=True):
        outcomes[index] = outcome
    return outcomes

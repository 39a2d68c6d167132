"""A FIFO consumer group's new messages (``fifo_messages_take``): each message group's head only,
in queue order, the next after the previous is acked or dead-lettered; messages taken past a
blocked head are remembered (``FifoTaken``) until the queue's offset passes them. Its own path
beside ``messages_take``, so other groups' receives pay nothing for it. See docs/design.md,
"FIFO message groups"."""

from __future__ import annotations

import random

from broker.models import ConsumerOffset, Delivery, DeliveryEvent, FifoTaken, Message
from broker.plumbing.sql import statement_cursor
from broker.rules.fifo import Slot, fifo_pick
from broker.services.consumption.handouts import Received, journal_entry, receipt_handle_new
from broker.services.consumption.take import consumer_offsets_create

FIFO_WINDOW = 2_000  # messages read per queue and receive past the offset (4 small columns)
"""How far past a queue's offset a FIFO receive looks for heads: a message group whose head is
more than this many messages behind a blocked one waits until the offset moves."""

_LOCK_SEED = 38  # hashtextextended seed of the message groups' advisory locks


def _locked_offsets(consumer_group: str, topic: str, queue_nums: int) -> list[ConsumerOffset]:
    """The group's offsets of ``topic`` no concurrent receiver holds, locked (``SKIP LOCKED``),
    creating the missing ones (the group's first receive of the topic, or queues added)."""

    def locked() -> list[ConsumerOffset]:
        return list(
            ConsumerOffset.objects.select_for_update(skip_locked=True).filter(
                consumer_group=consumer_group, topic=topic, queue_id__lt=queue_nums
            )
        )

    offsets = locked()
    if len(offsets) < queue_nums:
        consumer_offsets_create(consumer_group, topic, queue_nums)
        offsets = locked()
    return offsets


def _windows(
    topic: str, offsets: list[ConsumerOffset], condition: tuple[str, dict[str, object]] | None
) -> dict[int, list[Slot]]:
    """Each locked queue's messages from its offset on (at most ``FIFO_WINDOW``), in queue
    order, with whether the filter lets each through."""
    matches = condition[0] if condition else "true"
    sql = (
        "SELECT o.queue_id, m.queue_offset, m.message_group, m.matches FROM "
        "unnest(%(queues)s::int[], %(offsets)s::bigint[]) AS o(queue_id, next) "
        "CROSS JOIN LATERAL (SELECT m.queue_offset, m.message_group, "
        f"({matches}) AS matches FROM {Message._meta.db_table} m WHERE m.topic = %(topic)s "
        "AND m.queue_id = o.queue_id AND m.queue_offset >= o.next ORDER BY m.queue_offset "
        "LIMIT %(window)s) m ORDER BY o.queue_id, m.queue_offset"
    )
    params = {
        "queues": [o.queue_id for o in offsets],
        "offsets": [o.offset for o in offsets],
        "topic": topic,
        "window": FIFO_WINDOW,
        **(condition[1] if condition else {}),
    }
    out: dict[int, list[Slot]] = {o.queue_id: [] for o in offsets}
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        for queue_id, queue_offset, group, ok in cursor.fetchall():
            out[queue_id].append(Slot(queue_offset, group, ok))
    return out


def _in_flight_groups(consumer_group: str, topic: str) -> set[str]:
    """The message groups of ``topic`` with a message in flight to ``consumer_group`` (a
    ``Delivery``; the group's in-flight deliveries, a receive batch's worth per consumer)."""
    with statement_cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT m.message_group FROM {Delivery._meta.db_table} d "
            f"JOIN {Message._meta.db_table} m ON m.commit_log_offset = d.message_id "
            "WHERE d.consumer_group = %(group)s AND d.topic = %(topic)s "
            "AND m.message_group <> ''",
            {"group": consumer_group, "topic": topic},
        )
        return {g for (g,) in cursor.fetchall()}


def _groups_locked(consumer_group: str, topic: str, groups: set[str]) -> set[str]:
    """Of ``groups`` (at most a receive's ``want``), those this receive now holds: a
    transaction-level advisory lock per consumer group, topic and message group, tried without
    waiting, so two receivers never take two messages of one group, even of a group that
    spans queues (each holds its own queues' offsets)."""
    with statement_cursor() as cursor:
        cursor.execute(
            "SELECT g FROM unnest(%(groups)s::text[]) AS g WHERE pg_try_advisory_xact_lock("
            "hashtextextended(%(prefix)s || g, %(seed)s))",
            {
                "groups": sorted(groups),
                "prefix": f"{consumer_group}\x01{topic}\x01",
                "seed": _LOCK_SEED,
            },
        )
        return {g for (g,) in cursor.fetchall()}


def _plan(
    offsets: list[ConsumerOffset],
    windows: dict[int, list[Slot]],
    taken: dict[int, set[int]],
    busy: set[str],
    want: int,
) -> tuple[list[tuple[int, Slot]], dict[int, int]]:
    """``fifo_pick`` over the locked queues in their order: the (queue id, slot) pairs taken
    and each queue's new offset."""
    busy = set(busy)
    picked: list[tuple[int, Slot]] = []
    moves: dict[int, int] = {}
    for offset in offsets:
        slots, moves[offset.queue_id] = fifo_pick(
            windows[offset.queue_id],
            offset=offset.offset,
            taken=taken[offset.queue_id],
            busy=busy,
            want=want - len(picked),
        )
        picked.extend((offset.queue_id, s) for s in slots)
    return picked, moves


def fifo_messages_take(
    *,
    consumer_group: str,
    topic: str,
    queue_nums: int,
    want: int,
    until: int,
    now: int,
    condition: tuple[str, dict[str, object]] | None = None,
) -> list[Received]:
    """Inside a receive's database transaction (``messages_receive``, for a consumer group with
    ``fifo``): take up to ``want`` new messages of ``topic``, as ``messages_take`` does (the
    group's unlocked offsets, queues in a random order, ``Delivery`` rows at attempt 1 invisible
    until ``until`` ms, ``delivered`` journal rows at ``now`` ms, ``condition`` a filter's),
    but of each message group only its head (``fifo_pick``): its earliest message not yet
    taken, and only while no message of the group is in flight. Messages of no group are taken
    as normal ones. Each queue's offset moves to its first message neither taken nor rejected
    by the filter; what was taken past it is recorded as ``FifoTaken`` rows, deleted once the
    offset passes them.

    Returns:
        the messages taken, each with attempt 1 and its new receipt handle, in queue order.
    """
    offsets = _locked_offsets(consumer_group, topic, queue_nums)
    if not offsets:
        return []
    windows = _windows(topic, offsets, condition)
    taken: dict[int, set[int]] = {o.queue_id: set() for o in offsets}
    for queue_id, queue_offset in FifoTaken.objects.filter(
        consumer_group=consumer_group, topic=topic, queue_id__in=list(taken)
    ).values_list("queue_id", "queue_offset"):
        taken[queue_id].add(queue_offset)
    random.shuffle(offsets)
    busy = _in_flight_groups(consumer_group, topic)
    picked, moves = _plan(offsets, windows, taken, busy, want)
    groups = {s.message_group for _, s in picked if s.message_group}
    if groups:
        locked = _groups_locked(consumer_group, topic, groups)
        busy = _in_flight_groups(consumer_group, topic)  # read again, the locks held
        if locked != groups or busy & groups:
            # Plan again with every group not held here busy: picks only from held groups.
            seen = {s.message_group for w in windows.values() for s in w if s.message_group}
            picked, moves = _plan(offsets, windows, taken, busy | (seen - locked), want)
    moved = [o for o in offsets if moves[o.queue_id] != o.offset]
    for offset in moved:
        offset.offset = moves[offset.queue_id]
    out = _hand_out(consumer_group, topic, picked, until=until, now=now)
    FifoTaken.objects.bulk_create(
        [
            FifoTaken(
                consumer_group=consumer_group, topic=topic, queue_id=q, queue_offset=s.queue_offset
            )
            for q, s in picked
        ]
    )
    if moved:
        ConsumerOffset.objects.bulk_update(moved, ["offset"])
        _taken_forget(consumer_group, topic, moved)
    return out


def _hand_out(
    consumer_group: str, topic: str, picked: list[tuple[int, Slot]], *, until: int, now: int
) -> list[Received]:
    """The ``Delivery`` and ``delivered`` journal rows of the picked messages."""
    if not picked:
        return []
    order = {(q, s.queue_offset): n for n, (q, s) in enumerate(picked)}
    by_queue: dict[int, list[int]] = {}
    for q, s in picked:
        by_queue.setdefault(q, []).append(s.queue_offset)
    messages: list[Message] = []
    for q, queue_offsets in by_queue.items():
        messages.extend(
            Message.objects.filter(topic=topic, queue_id=q, queue_offset__in=queue_offsets)
        )
    messages.sort(key=lambda m: order[(m.queue_id, m.queue_offset)])
    out = [Received(m, 1, receipt_handle_new()) for m in messages]
    Delivery.objects.bulk_create(
        Delivery(
            consumer_group=consumer_group,
            message=r.message,
            topic=topic,
            delivery_attempt=1,
            invisible_until_timestamp=until,
            receipt_handle=r.receipt_handle,
        )
        for r in out
    )
    DeliveryEvent.objects.bulk_create(
        journal_entry(
            group=consumer_group,
            message=r.message,
            kind=DeliveryEvent.Kind.DELIVERED,
            attempt=1,
            now=now,
        )
        for r in out
    )
    return out


def _taken_forget(consumer_group: str, topic: str, moved: list[ConsumerOffset]) -> None:
    """Delete the ``FifoTaken`` rows the moved offsets passed."""
    with statement_cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {FifoTaken._meta.db_table} t USING unnest(%(queues)s::int[], "
            "%(offsets)s::bigint[]) AS o(queue_id, next) WHERE t.consumer_group = %(group)s "
            "AND t.topic = %(topic)s AND t.queue_id = o.queue_id AND t.queue_offset < o.next",
            {
                "queues": [o.queue_id for o in moved],
                "offsets": [o.offset for o in moved],
                "group": consumer_group,
                "topic": topic,
            },
        )


def fifo_taken_forget(*, consumer_group: str, topic: str, queue_id: int, below: int) -> int:
    """Forget what ``consumer_group`` took of queue ``queue_id`` of ``topic`` below queue offset
    ``below`` (an offset reset moved the group's offset forward there).

    Returns:
        the rows deleted.
    """
    deleted, _ = FifoTaken.objects.filter(
        consumer_group=consumer_group, topic=topic, queue_id=queue_id, queue_offset__lt=below
    ).delete()
    return deleted


def fifo_progress_forget(consumer_group: str) -> int:
    """Make ``consumer_group``'s offsets the whole truth again, as a group made not FIFO needs
    (its receives then take everything from its offsets on): lock its offsets (waiting for the
    receives that hold them), delete its deliveries of messages at or past its offset of their
    queue and its ``FifoTaken`` rows. Those messages are handed out again (at least once);
    the receipt handles of the deleted deliveries fail. Inside the caller's transaction.

    Returns:
        the deliveries deleted.
    """
    list(ConsumerOffset.objects.select_for_update().filter(consumer_group=consumer_group))
    with statement_cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {Delivery._meta.db_table} d USING {Message._meta.db_table} m, "
            f"{ConsumerOffset._meta.db_table} o WHERE d.consumer_group = %(group)s "
            "AND m.commit_log_offset = d.message_id AND o.consumer_group = d.consumer_group "
            "AND o.topic = m.topic AND o.queue_id = m.queue_id AND m.queue_offset >= o.offset",
            {"group": consumer_group},
        )
        deleted = cursor.rowcount
    FifoTaken.objects.filter(consumer_group=consumer_group).delete()
    return deleted

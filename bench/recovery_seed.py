"""Seed many transactions quickly, as the services would leave them, for timing the rebuild
(``bench/rebuild_cost.py``). Bulk inserts, not the services: a
service prepare costs a few milliseconds, 100,000 of them minutes.

Of ``n`` transactions on topic ``TranTest`` (4 queues) and producer group ``G``: a third
committed by their producer (delivered message, ``Resolution``), a third rolled back, a third
PREPARED with two delivered checks each (two ``check_sent`` events). Resolutions are flushed
into Op messages of ``OP_BATCH`` offsets each, but for the last batch of each half queue,
which stays in the journal. Half message bodies are ``BODY_SIZE`` bytes (the rebuild must not
read them).
"""

from __future__ import annotations

from broker.conf import conf
from broker.constants import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    OP_REMOVE_TAG,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_PREPARED_TYPE,
)
from broker.models import ConsumeQueue, Message, Resolution, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.services.commitlog.storage import system_topic_ensure
from broker.services.transactions.half import half_queue_select

BATCH = 5000  # rows per INSERT
OP_BATCH = 500  # offsets per Op message (~3.5 KB, under HALFMOON_OP_MSG_MAX_SIZE)
BODY_SIZE = 512
TOPIC = "TranTest"
GROUP = "G"
REAL_QUEUES = 4


def _bulk(model, objs):
    return model.objects.bulk_create(objs, batch_size=BATCH)


def _next_offsets(topic: str, count: int) -> list[int]:
    found = dict(ConsumeQueue.objects.filter(topic=topic).values_list("queue_id", "max_offset"))
    return [found.get(q, 0) for q in range(count)]


def seed(n: int, *, start: int = 0) -> None:
    """Insert ``n`` transactions (see the module docstring), numbered from ``start`` (call again
    with ``start`` = the number already seeded to add more). Needs topic TranTest and group G."""
    half_queues = conf.half_queue_nums
    timeout_ms = conf.transaction_timeout_ms
    interval = conf.transaction_check_interval_ms
    system_topic_ensure(HALF_TOPIC, half_queues)
    system_topic_ensure(OP_HALF_TOPIC, half_queues)
    base = now_ms() - 3_600_000
    body = b"x" * BODY_SIZE
    half_next = _next_offsets(HALF_TOPIC, half_queues)
    real_next = _next_offsets(TOPIC, REAL_QUEUES)
    op_next = _next_offsets(OP_HALF_TOPIC, half_queues)
    rows = []  # (tid, half queue, half offset, real queue, kind)
    for i in range(start, start + n):
        tid = f"{i:032X}"
        hq = half_queue_select(tid)
        rows.append((tid, hq, half_next[hq], i % REAL_QUEUES, i % 3))
        half_next[hq] += 1

    def props(tid: str, rq: int) -> dict[str, str]:
        return {
            PROPERTY_REAL_TOPIC: TOPIC,
            PROPERTY_REAL_QUEUE_ID: str(rq),
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_PRODUCER_GROUP: GROUP,
            PROPERTY_UNIQ_KEY: tid,
        }

    halves = _bulk(
        Message,
        (
            Message(
                topic=HALF_TOPIC,
                queue_id=hq,
                queue_offset=ho,
                msg_id=tid,
                body=body,
                properties=props(tid, rq),
                sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
                producer_group=GROUP,
                born_timestamp=base + i,
                store_timestamp=base + i,
            )
            for i, (tid, hq, ho, rq, _) in enumerate(rows)
        ),
    )
    half_clo = [m.commit_log_offset for m in halves]

    delivered_offset: dict[int, int] = {}
    deliveries = []
    for i, (tid, _hq, _ho, rq, kind) in enumerate(rows):
        if kind == 0:
            delivered_offset[i] = real_next[rq]
            deliveries.append(
                Message(
                    topic=TOPIC,
                    queue_id=rq,
                    queue_offset=real_next[rq],
                    msg_id=tid,
                    body=body,
                    properties={
                        k: v for k, v in props(tid, rq).items() if k.startswith(("P", "U"))
                    },
                    sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
                    producer_group=GROUP,
                    born_timestamp=base + i,
                    store_timestamp=base + i + 10,
                    prepared_transaction_offset=half_clo[i],
                )
            )
            real_next[rq] += 1
    _bulk(Message, deliveries)

    # Op messages: per half queue, OP_BATCH resolved offsets each; the last batch unflushed.
    resolved_by_queue: dict[int, list[int]] = {}
    for i, (_tid, hq, _ho, _rq, kind) in enumerate(rows):
        if kind in (0, 1):
            resolved_by_queue.setdefault(hq, []).append(i)
    op_of: dict[int, int] = {}
    for hq, indexes in sorted(resolved_by_queue.items()):
        batches = [indexes[k : k + OP_BATCH] for k in range(0, len(indexes), OP_BATCH)][:-1]
        ops = []
        for batch in batches:
            ops.append(
                Message(
                    topic=OP_HALF_TOPIC,
                    queue_id=hq,
                    queue_offset=op_next[hq],
                    msg_id=f"OP{hq:04d}{op_next[hq]:026d}",
                    tags=OP_REMOVE_TAG,
                    body="".join(f"{rows[i][2]}," for i in batch).encode("ascii"),
                    born_timestamp=base + n,
                    store_timestamp=base + n,
                )
            )
            op_next[hq] += 1
        for batch, op in zip(batches, _bulk(Message, ops), strict=True):
            for i in batch:
                op_of[i] = op.commit_log_offset

    states = ("COMMITTED", "ROLLED_BACK", "PREPARED")
    _bulk(
        Transaction,
        (
            Transaction(
                transaction_id=tid,
                producer_group=GROUP,
                topic=TOPIC,
                queue_id=rq,
                half_queue_id=hq,
                half_queue_offset=ho,
                half_commit_log_offset=half_clo[i],
                state=states[kind],
                check_times=2 if kind == 2 else 0,
                check_immunity_ms=timeout_ms,
                born_timestamp=base + i,
                next_check_timestamp=base + n + interval if kind == 2 else None,
                last_check_timestamp=base + n if kind == 2 else None,
                resolved_timestamp=None if kind == 2 else base + i + 10,
                resolved_by=None if kind == 2 else "producer",
                queue_offset=delivered_offset.get(i),
            )
            for i, (tid, hq, ho, rq, kind) in enumerate(rows)
        ),
    )
    _bulk(
        Resolution,
        (
            Resolution(
                transaction_id=tid,
                half_queue_id=hq,
                half_queue_offset=ho,
                action="COMMIT" if kind == 0 else "ROLLBACK",
                resolved_by="producer",
                resolved_timestamp=base + i + 10,
                op_commit_log_offset=op_of.get(i),
            )
            for i, (tid, hq, ho, _rq, kind) in enumerate(rows)
            if kind in (0, 1)
        ),
    )
    _bulk(
        TransactionEvent,
        (
            TransactionEvent(
                transaction_id=tid,
                kind=TransactionEvent.Kind.CHECK_SENT,
                timestamp=base + n + k,
                check_times=k + 1,
                outcome="UNKNOW",
                actor="http",
            )
            for tid, _hq, _ho, _rq, kind in rows
            if kind == 2
            for k in range(2)
        ),
    )
    for hq in range(half_queues):
        ConsumeQueue.objects.filter(topic=HALF_TOPIC, queue_id=hq).update(max_offset=half_next[hq])
        ConsumeQueue.objects.filter(topic=OP_HALF_TOPIC, queue_id=hq).update(max_offset=op_next[hq])
    for rq in range(REAL_QUEUES):
        ConsumeQueue.objects.filter(topic=TOPIC, queue_id=rq).update(max_offset=real_next[rq])
    from django.db import connection

    with connection.cursor() as cursor:  # statistics, as a long-running database has them
        for model in (Message, Transaction, Resolution, TransactionEvent, ConsumeQueue):
            cursor.execute(f"ANALYZE {model._meta.db_table}")

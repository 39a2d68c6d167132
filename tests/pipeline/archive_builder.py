"""Synthetic archives for the pipeline's tests (and anyone who needs one): describe
transactions compactly, then write them in the archive's real layout (``broker.pipeline.schema``
through ``archive_io.segment_write``: one complete segment per table and time range, with
``_SUCCESS``), as the broker's export would.

A clean committed transaction, a rollback, a discard after the check max, a resume then an
operator commit, and a consumer group that received everything::

    b = ArchiveBuilder(start_ms=T0)
    b.transaction("tx-commit", at=T0 + 1_000).commit(at=T0 + 1_200)
    b.transaction("tx-rollback", at=T0 + 2_000).rollback(at=T0 + 2_300, by="check")
    tx = b.transaction("tx-discard", at=T0 + 3_000)
    for i in range(3):
        tx.check(at=T0 + 10_000 * (i + 1))
    tx.discard(at=T0 + 45_000)
    tx = b.transaction("tx-resumed", at=T0 + 4_000)
    tx.discard(at=T0 + 50_000).resume(at=T0 + 60_000).commit(at=T0 + 61_000, by="operator")
    b.consume_all("C", delay_ms=100)
    b.write(spark, uri)

Anomalies are planted with the same calls (``docs/reconciliation.md`` defines each):

- hanging: a transaction left PREPARED after ``check_max`` checks (``check``), or older than
  the reserved time;
- lost_commit: ``commit(deliver=False)``;
- rolled_back_but_delivered: ``rollback`` then ``deliver``;
- orphan_delivery: ``ArchiveBuilder.orphan_delivery`` (no half message), or ``deliver`` on a
  transaction that never ends;
- double_resolution: ``commit`` then ``op_entry`` (a second Op entry), or a second
  ``resolution``;
- duplicate_delivery: ``commit`` then ``deliver`` again on the same topic;
- late_end: ``discard`` then ``end_refused`` (or a ``resolution`` by the producer);
- undelivered_to_group: ``consume_all(group, skip={message})``;
- slow_visibility: ``commit(visible_after_ms=...)`` past the SLA;
- bucket_mismatch: a transaction left PREPARED (checks undelivered) in a settled bucket;
- scheduled_undelivered: ``ArchiveBuilder.scheduled`` (a delay message on the timer topic) with
  neither ``timer_deliver`` (its copy on its topic) nor ``recall`` (a delete marker).

Offsets are the builder's: commit log offsets and queue offsets are given at ``write`` in order
of store time, so any call order gives a consistent log. Transaction events and delivery
events get ids in order of time the same way. Op entries of resolutions are batched as RIP-50
does: every resolution of a half queue in one ``op_batch_ms`` window goes into one Op message
at the window's end.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    OP_REMOVE_TAG,
    PROPERTY_DISCARD_REASON,
    PROPERTY_HALF_QUEUE_OFFSET,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_NOT_TYPE,
    SYS_FLAG_TRANSACTION_PREPARED_TYPE,
    TIMER_TOPIC,
)
from broker.pipeline.schema import ARCHIVE_TABLES, TIME_COLUMNS
from broker.rules.anomalies import HOUR_MS
from broker.rules.op_body import op_body_size

_seq = itertools.count()


@dataclass(eq=False)
class Message:
    """One commit log row; its ``commit_log_offset`` and ``queue_offset`` are set by ``write``
    (None before). ``half``: the half message a delivered message or discard copy came from;
    ``op_halves``: the half messages an Op message names."""

    topic: str
    queue_id: int
    store_ms: int
    msg_id: str
    producer_group: str
    sys_flag: int
    born_ms: int
    real_topic: str | None = None
    real_queue_id: int | None = None
    half: Message | None = None
    discard_reason: str | None = None
    op_halves: list[Message] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str = ""
    delivery_ms: int | None = None  # TIMER_DELIVER_MS
    del_key: str | None = None  # TIMER_DEL_UNIQKEY
    commit_log_offset: int | None = None
    queue_offset: int | None = None
    seq: int = field(default_factory=lambda: next(_seq))


@dataclass(eq=False)
class _Row:
    """A journal row whose id and offsets are resolved at ``write``."""

    table: str
    timestamp: int
    values: dict[str, Any]
    message: Message | None = None  # a delivery event's message / a resolution's half message
    seq: int = field(default_factory=lambda: next(_seq))


class Transaction:
    """One transaction being described; every method returns ``self`` so calls chain.
    Times (``at``) are ms since the epoch; ``by``/``actor`` are RocketMQ's resolvers
    (producer, check, operator)."""

    def __init__(self, builder: ArchiveBuilder, half: Message) -> None:
        self.builder = builder
        self.transaction_id = half.msg_id
        self.first_half = half
        self.half = half  # the current half message (a resume appends a copy)
        self.delivered: list[Message] = []
        self._checks = 0

    @property
    def producer_group(self) -> str:
        return self.half.producer_group

    @property
    def topic(self) -> str:
        """The half message's real topic (REAL_TOPIC)."""
        return self.half.real_topic or ""

    def check(self, *, at: int, outcome: str = "UNKNOW") -> Transaction:
        """A back-check delivered to the producer (``check_sent``; counts in check_times)."""
        self._checks += 1
        self.builder._event(
            self, "check_sent", at, check_times=self._checks, outcome=outcome, actor="check"
        )
        return self

    def check_undelivered(self, *, at: int) -> Transaction:
        """A back-check that could not reach the producer group (not counted)."""
        self.builder._event(self, "check_undelivered", at, check_times=self._checks, actor="check")
        return self

    def resolution(
        self, *, at: int, action: str, by: str = "producer", reason: str = ""
    ) -> Transaction:
        """A resolution journal row only (no Op entry, no delivered message): ``action``
        COMMIT or ROLLBACK."""
        self.builder._rows.append(
            _Row(
                "resolutions",
                at,
                {
                    "transaction_id": self.transaction_id,
                    "half_queue_id": self.half.queue_id,
                    "action": action,
                    "resolved_by": by,
                    "reason": reason,
                    "resolved_timestamp": at,
                },
                message=self.half,
            )
        )
        if by == "operator":
            self.builder._event(
                self,
                "resolved",
                at,
                outcome=action,
                actor="operator:admin",
                detail={"reason": reason},
            )
        return self

    def op_entry(self, *, at: int) -> Transaction:
        """An Op message at ``at`` naming the current half message on its own (outside the
        batching): a second one after a resolution plants a double resolution."""
        self.builder._op_message(self.half.queue_id, at, [self.half])
        return self

    def commit(
        self,
        *,
        at: int,
        by: str = "producer",
        deliver: bool = True,
        visible_after_ms: int = 0,
    ) -> Transaction:
        """Commit: the resolution, its (batched) Op entry and, unless ``deliver`` is False, the
        delivered message on the real topic and queue, stored ``visible_after_ms`` after."""
        self.resolution(at=at, action="COMMIT", by=by)
        self.builder._op_pending.append((self.half, at))
        if deliver:
            self.deliver(at=at + visible_after_ms)
        return self

    def rollback(self, *, at: int, by: str = "producer") -> Transaction:
        """Roll back: the resolution and its (batched) Op entry."""
        self.resolution(at=at, action="ROLLBACK", by=by)
        self.builder._op_pending.append((self.half, at))
        return self

    def deliver(self, *, at: int, topic: str | None = None, queue_id: int | None = None) -> Message:
        """A delivered message of this transaction (sys_flag TRANSACTION_COMMIT_TYPE,
        ``prepared_transaction_offset`` = the half's offset), on the real topic and queue unless
        given. Returns it (for ``ArchiveBuilder.consume``)."""
        message = Message(
            topic=topic or self.topic,
            queue_id=self.half.real_queue_id if queue_id is None else queue_id,
            store_ms=at,
            msg_id=self.transaction_id,
            producer_group=self.producer_group,
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
            born_ms=self.first_half.born_ms,
            half=self.half,
            properties={PROPERTY_UNIQ_KEY: self.transaction_id},
        )
        self.builder.messages.append(message)
        self.delivered.append(message)
        return message

    def discard(self, *, at: int, reason: str = "check_max") -> Transaction:
        """The scan's discard: a ``discarded`` event and the copy on
        TRANS_CHECK_MAX_TIME_TOPIC."""
        self.builder.messages.append(
            Message(
                topic=CHECK_MAX_TIME_TOPIC,
                queue_id=0,
                store_ms=at,
                msg_id=self.transaction_id,
                producer_group=self.producer_group,
                sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
                born_ms=self.first_half.born_ms,
                half=self.half,
                discard_reason=reason,
                properties={
                    **self.half.properties,
                    PROPERTY_TRANSACTION_CHECK_TIMES: str(self._checks),
                    PROPERTY_DISCARD_REASON: reason,
                },
            )
        )
        self.builder._event(self, "discarded", at, outcome=reason, actor="scan")
        return self

    def resume(self, *, at: int) -> Transaction:
        """An operator's resume-check: a copy of the half message re-appended to its half queue
        (same msg_id and born time), a ``resumed`` event; check_times starts again at 0."""
        copy = Message(
            topic=HALF_TOPIC,
            queue_id=self.half.queue_id,
            store_ms=at,
            msg_id=self.transaction_id,
            producer_group=self.producer_group,
            sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
            born_ms=self.first_half.born_ms,
            real_topic=self.half.real_topic,
            real_queue_id=self.half.real_queue_id,
            properties=dict(self.half.properties),
        )
        self.builder.messages.append(copy)
        self.half = copy
        self._checks = 0
        self.builder._event(self, "resumed", at, actor="operator:admin", detail={"reason": "test"})
        return self

    def end_refused(
        self, *, at: int, action: str = "COMMIT", actor: str = "producer", state: str = "DISCARDED"
    ) -> Transaction:
        """An end (``action`` COMMIT or ROLLBACK, from ``actor`` producer or check) refused
        because the transaction was already ended (``state``), as transaction_end journals it."""
        self.builder._event(
            self, "end_refused", at, outcome=action, actor=actor, detail={"state": state}
        )
        return self


class ArchiveBuilder:
    """Collects transactions, messages and deliveries, then writes them as an archive.

    Args:
        start_ms: a reference time (ms); nothing is checked against it, it only seeds the
            default born times.
        half_queue_nums: half queues (a transaction's is a hash of its id, as the broker's).
        topic_queue_nums: queues of each real topic (a transaction's real queue is a hash too).
        op_batch_ms: the Op batching window (RIP-50 transactionOpBatchInterval).
    """

    def __init__(
        self,
        *,
        start_ms: int,
        half_queue_nums: int = 2,
        topic_queue_nums: int = 2,
        op_batch_ms: int = 1_000,
    ) -> None:
        self.start_ms = start_ms
        self.half_queue_nums = half_queue_nums
        self.topic_queue_nums = topic_queue_nums
        self.op_batch_ms = op_batch_ms
        self.messages: list[Message] = []
        self.transactions: dict[str, Transaction] = {}
        self._rows: list[_Row] = []
        self._op_pending: list[tuple[Message, int]] = []

    # -- describing ---------------------------------------------------------------------------

    def transaction(
        self,
        transaction_id: str,
        *,
        at: int,
        producer_group: str = "G",
        topic: str = "T",
        queue_id: int | None = None,
        half_queue_id: int | None = None,
    ) -> Transaction:
        """A half message stored at ``at`` (PREPARED until something ends it)."""
        if transaction_id in self.transactions:
            raise ValueError(f"transaction {transaction_id} described twice")
        digest = int(hashlib.sha1(transaction_id.encode()).hexdigest(), 16)
        real_qid = digest % self.topic_queue_nums if queue_id is None else queue_id
        half = Message(
            topic=HALF_TOPIC,
            queue_id=digest % self.half_queue_nums if half_queue_id is None else half_queue_id,
            store_ms=at,
            msg_id=transaction_id,
            producer_group=producer_group,
            sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
            born_ms=at,
            real_topic=topic,
            real_queue_id=real_qid,
            properties={
                PROPERTY_REAL_TOPIC: topic,
                PROPERTY_REAL_QUEUE_ID: str(real_qid),
                PROPERTY_TRANSACTION_PREPARED: "true",
                PROPERTY_PRODUCER_GROUP: producer_group,
                PROPERTY_UNIQ_KEY: transaction_id,
            },
        )
        self.messages.append(half)
        tx = Transaction(self, half)
        self.transactions[transaction_id] = tx
        return tx

    def orphan_delivery(
        self,
        msg_id: str,
        *,
        at: int,
        topic: str = "T",
        queue_id: int = 0,
        producer_group: str = "G",
    ) -> Message:
        """A delivered transactional message (sys_flag TRANSACTION_COMMIT_TYPE) whose msg_id has
        no half message anywhere."""
        return self._message(
            msg_id, at, topic, queue_id, producer_group, SYS_FLAG_TRANSACTION_COMMIT_TYPE
        )

    def normal_message(
        self,
        msg_id: str,
        *,
        at: int,
        topic: str = "T",
        queue_id: int = 0,
        producer_group: str = "G",
    ) -> Message:
        """A plain (not transactional) message on ``topic``."""
        return self._message(
            msg_id, at, topic, queue_id, producer_group, SYS_FLAG_TRANSACTION_NOT_TYPE
        )

    def scheduled(
        self,
        msg_id: str,
        *,
        at: int,
        due: int,
        topic: str = "T",
        queue_id: int = 0,
        producer_group: str = "G",
    ) -> Message:
        """A delay message stored at ``at`` on the timer topic, due at ``due`` on ``topic``
        (as ``broker.services.timers.schedule.message_send_at`` stores it)."""
        message = Message(
            topic=TIMER_TOPIC,
            queue_id=0,
            store_ms=at,
            msg_id=msg_id,
            producer_group=producer_group,
            sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
            born_ms=at,
            real_topic=topic,
            real_queue_id=queue_id,
            delivery_ms=due,
            properties={
                PROPERTY_UNIQ_KEY: msg_id,
                PROPERTY_REAL_TOPIC: topic,
                PROPERTY_REAL_QUEUE_ID: str(queue_id),
                PROPERTY_TIMER_DELIVER_MS: str(due),
            },
        )
        self.messages.append(message)
        return message

    def timer_deliver(self, scheduled: Message, *, at: int) -> Message:
        """The timer's copy of ``scheduled`` on its topic, stored at ``at`` (``TIMER_DELIVER_MS``
        kept, ``REAL_TOPIC``/``REAL_QID`` dropped)."""
        copy = self._message(
            scheduled.msg_id,
            at,
            scheduled.real_topic or "",
            scheduled.real_queue_id or 0,
            scheduled.producer_group,
            SYS_FLAG_TRANSACTION_NOT_TYPE,
        )
        copy.delivery_ms = scheduled.delivery_ms
        copy.properties[PROPERTY_TIMER_DELIVER_MS] = str(scheduled.delivery_ms)
        return copy

    def recall(self, scheduled: Message, *, at: int) -> Message:
        """A recall's delete marker for ``scheduled``, stored at ``at`` on the timer topic (as
        ``broker.services.timers.recall`` appends it)."""
        key = f"{scheduled.real_topic}+{scheduled.msg_id}"
        marker = Message(
            topic=TIMER_TOPIC,
            queue_id=0,
            store_ms=at,
            msg_id=f"del-{next(_seq)}",
            producer_group=scheduled.producer_group,
            sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
            born_ms=at,
            real_topic=scheduled.real_topic,
            real_queue_id=scheduled.real_queue_id,
            delivery_ms=scheduled.delivery_ms,
            del_key=key,
            properties={
                PROPERTY_REAL_TOPIC: scheduled.real_topic or "",
                PROPERTY_TIMER_DELIVER_MS: str(scheduled.delivery_ms),
                PROPERTY_TIMER_DEL_UNIQKEY: key,
            },
        )
        self.messages.append(marker)
        return marker

    def _message(
        self, msg_id: str, at: int, topic: str, queue_id: int, producer_group: str, sys_flag: int
    ) -> Message:
        message = Message(
            topic=topic,
            queue_id=queue_id,
            store_ms=at,
            msg_id=msg_id,
            producer_group=producer_group,
            sys_flag=sys_flag,
            born_ms=at,
            properties={PROPERTY_UNIQ_KEY: msg_id},
        )
        self.messages.append(message)
        return message

    def consume(
        self,
        group: str,
        message: Message,
        *,
        at: int,
        attempts: int = 1,
        ack_after_ms: int | None = 50,
        dead_letter_after_ms: int | None = None,
        retry_ms: int = 1_000,
    ) -> None:
        """``group`` receives ``message`` ``attempts`` times (``retry_ms`` apart, from ``at``),
        then acks it ``ack_after_ms`` after the last delivery (None: never) and/or dead-letters
        it ``dead_letter_after_ms`` after the last delivery."""
        for attempt in range(1, attempts + 1):
            self._delivery_event(
                group, message, "delivered", at + (attempt - 1) * retry_ms, attempt
            )
        last = at + (attempts - 1) * retry_ms
        if ack_after_ms is not None:
            self._delivery_event(group, message, "acked", last + ack_after_ms, attempts)
        if dead_letter_after_ms is not None:
            self._delivery_event(
                group, message, "dead_lettered", last + dead_letter_after_ms, attempts
            )

    def consume_all(
        self,
        group: str,
        *,
        topics: Iterable[str] | None = None,
        delay_ms: int = 100,
        skip: Iterable[Message] = (),
    ) -> int:
        """``group`` receives and acks every delivered or normal message described so far (on
        ``topics``, default all), ``delay_ms`` after it was stored, except those in ``skip``.
        Returns how many it received."""
        wanted = None if topics is None else set(topics)
        skipped = {id(m) for m in skip}
        received = 0
        for message in list(self.messages):
            if message.topic in (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TIME_TOPIC, TIMER_TOPIC):
                continue
            if (wanted is not None and message.topic not in wanted) or id(message) in skipped:
                continue
            self.consume(group, message, at=message.store_ms + delay_ms)
            received += 1
        return received

    # -- writing ------------------------------------------------------------------------------

    def tables(self) -> dict[str, list[tuple]]:
        """Every table's rows as tuples in ``ARCHIVE_TABLES`` column order, offsets and ids
        assigned (idempotent: calling it twice gives the same rows)."""
        messages = list(self.messages) + self._batched_ops()
        messages.sort(key=lambda m: (m.store_ms, m.seq))
        queue_next: dict[tuple[str, int], int] = defaultdict(int)
        for offset, message in enumerate(messages, start=1_000):
            message.commit_log_offset = offset
            key = (message.topic, message.queue_id)
            message.queue_offset = queue_next[key]
            queue_next[key] += 1
        out: dict[str, list[tuple]] = {"commit_log": [_commit_log_row(m) for m in messages]}
        rows = sorted(self._rows, key=lambda r: (r.timestamp, r.seq))
        ids: dict[str, itertools.count] = defaultdict(lambda: itertools.count(1))
        for table in ("resolutions", "transaction_events", "delivery_events"):
            columns = [name for name, _ in ARCHIVE_TABLES[table]]
            table_rows = []
            for row in rows:
                if row.table != table:
                    continue
                values = dict(row.values)
                if table == "resolutions":
                    values["half_queue_offset"] = row.message.queue_offset
                elif table == "delivery_events":
                    values.update(
                        topic=row.message.topic,
                        queue_id=row.message.queue_id,
                        queue_offset=row.message.queue_offset,
                        commit_log_offset=row.message.commit_log_offset,
                        msg_id=row.message.msg_id,
                    )
                if "id" in columns:
                    values["id"] = next(ids[table])
                table_rows.append(tuple(values.get(c) for c in columns))
            out[table] = table_rows
        return out

    def write(self, spark: Any, uri: str, *, segment_ms: int = HOUR_MS) -> dict[str, int]:
        """Write every table as complete segments of ``segment_ms`` (must divide an hour)
        under ``uri`` through ``archive_io.segment_write``. Returns rows written per table."""
        from broker.pipeline.archive_io import segment_write
        from broker.pipeline.arrow import arrow_table
        from broker.pipeline.schema import ddl

        if HOUR_MS % segment_ms:
            raise ValueError(f"segment_ms {segment_ms} does not divide an hour")
        written = {}
        for table, rows in self.tables().items():
            time_index = [name for name, _ in ARCHIVE_TABLES[table]].index(TIME_COLUMNS[table])
            segments: dict[int, list[tuple]] = defaultdict(list)
            for row in rows:
                segments[row[time_index] - row[time_index] % segment_ms].append(row)
            for start, segment_rows in sorted(segments.items()):
                # From Arrow: no Python worker is started for the rows.
                df = spark.createDataFrame(arrow_table(table, segment_rows), ddl(table))
                segment_write(spark, df, uri=uri, table=table, start_ms=start)
            written[table] = len(rows)
        return written

    # -- internals ----------------------------------------------------------------------------

    def _event(
        self,
        tx: Transaction,
        kind: str,
        at: int,
        *,
        check_times: int | None = None,
        outcome: str = "",
        actor: str = "",
        detail: dict[str, Any] | None = None,
    ) -> None:
        self._rows.append(
            _Row(
                "transaction_events",
                at,
                {
                    "transaction_id": tx.transaction_id,
                    "kind": kind,
                    "timestamp": at,
                    "check_times": check_times,
                    "outcome": outcome,
                    "actor": actor,
                    "detail": json.dumps(detail or {}),
                },
            )
        )

    def _delivery_event(
        self, group: str, message: Message, kind: str, at: int, attempt: int
    ) -> None:
        self._rows.append(
            _Row(
                "delivery_events",
                at,
                {
                    "consumer_group": group,
                    "kind": kind,
                    "delivery_attempt": attempt,
                    "timestamp": at,
                },
                message=message,
            )
        )

    def _op_message(self, half_queue_id: int, at: int, halves: list[Message]) -> Message:
        message = Message(
            topic=OP_HALF_TOPIC,
            queue_id=half_queue_id,
            store_ms=at,
            msg_id=f"op-{next(_seq)}",
            producer_group="",
            sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
            born_ms=at,
            op_halves=list(halves),
        )
        self.messages.append(message)
        return message

    def _batched_ops(self) -> list[Message]:
        """The Op messages of the resolutions, one per half queue and batch window (built
        fresh at each ``tables`` call, so describing more afterwards stays consistent)."""
        batches: dict[tuple[int, int], list[Message]] = defaultdict(list)
        for half, at in self._op_pending:
            flush = (at // self.op_batch_ms + 1) * self.op_batch_ms
            batches[(half.queue_id, flush)].append(half)
        ops = []
        for (queue_id, flush), halves in sorted(batches.items()):
            ops.append(
                Message(
                    topic=OP_HALF_TOPIC,
                    queue_id=queue_id,
                    store_ms=flush,
                    msg_id=f"op-batch-{queue_id}-{flush}",
                    producer_group="",
                    sys_flag=SYS_FLAG_TRANSACTION_NOT_TYPE,
                    born_ms=flush,
                    op_halves=halves,
                    seq=-1,
                )
            )
        return ops


def _commit_log_row(m: Message) -> tuple:
    """A commit log row in ``ARCHIVE_TABLES["commit_log"]`` order."""
    properties = dict(m.properties)
    half_queue_offset = None
    if m.discard_reason is not None and m.half is not None:
        half_queue_offset = m.half.queue_offset
        properties[PROPERTY_HALF_QUEUE_OFFSET] = str(half_queue_offset)
    op_offsets = [h.queue_offset for h in m.op_halves] if m.topic == OP_HALF_TOPIC else None
    prepared = (
        m.half.commit_log_offset
        if m.half is not None and m.sys_flag == SYS_FLAG_TRANSACTION_COMMIT_TYPE
        else None
    )
    values = {
        "commit_log_offset": m.commit_log_offset,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": m.msg_id,
        "producer_group": m.producer_group,
        "tags": OP_REMOVE_TAG if m.topic == OP_HALF_TOPIC else "",
        "keys": "",
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_ms,
        "store_timestamp": m.store_ms,
        "prepared_transaction_offset": prepared,
        "real_topic": m.real_topic,
        "real_queue_id": m.real_queue_id,
        "discard_reason": m.discard_reason,
        "half_queue_offset": half_queue_offset,
        "op_offsets": op_offsets,
        "body_size": op_body_size(op_offsets) if op_offsets is not None else 16,
        "properties": json.dumps(properties, sort_keys=True),
        "message_group": m.message_group,
        "delivery_timestamp": m.delivery_ms,
        "timer_del_uniq_key": m.del_key,
    }
    return tuple(values[name] for name, _ in ARCHIVE_TABLES["commit_log"])

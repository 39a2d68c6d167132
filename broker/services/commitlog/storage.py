"""Appending to the commit log and its queues (RocketMQ CommitLog.putMessage + ConsumeQueue):
one message at a time, or a batch in one statement (``statements`` holds the set-based SQL)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from django.db import IntegrityError, connection, transaction

from broker.models import ConsumeQueue, Message, Topic, model_new
from broker.plumbing.sql import statement_cursor
from broker.plumbing.wakeups import topic_channel, wakeup_on_commit
from broker.rules.clock import now_ms
from broker.rules.topics import is_undeliverable_topic
from broker.services.commitlog.statements import MESSAGE_COLUMNS, messages_append_cte


def new_msg_id() -> str:
    """A new message id (UNIQ_KEY): 32 upper-case hex characters, as RocketMQ's."""
    return uuid.uuid4().hex.upper()


def system_topic_ensure(name: str, queue_nums: int) -> Topic:
    """Return the broker-owned topic ``name`` with at least ``queue_nums`` queues, creating
    the topic and any missing queue on first use (e.g. after ``HALFMOON_HALF_QUEUE_NUMS`` grew).

    Safe under concurrent callers: the unique constraints arbitrate and losers re-read.
    """
    topic = Topic.objects.filter(name=name).first()
    if topic is None:
        try:
            with transaction.atomic():
                topic = Topic.objects.create(name=name, queue_nums=queue_nums, system=True)
        except IntegrityError:
            topic = Topic.objects.get(name=name)
    if topic.queue_nums < queue_nums:
        Topic.objects.filter(pk=topic.pk, queue_nums__lt=queue_nums).update(queue_nums=queue_nums)
        topic.queue_nums = queue_nums
    ConsumeQueue.objects.bulk_create(
        [ConsumeQueue(topic=name, queue_id=q) for q in range(topic.queue_nums)],
        ignore_conflicts=True,
    )
    return topic


def message_new(
    *,
    topic: str,
    queue_id: int,
    msg_id: str,
    body: bytes,
    body_is_text: bool = True,
    tags: str = "",
    keys: str = "",
    properties: dict[str, Any] | None = None,
    sys_flag: int = 0,
    producer_group: str = "",
    born_timestamp: int | None = None,
    prepared_transaction_offset: int | None = None,
    message_group: str = "",
) -> Message:
    """The unsaved message ``message_put`` stores (arguments as there; ``message_group`` a FIFO
    message's group, "" for none): store time now (ms),
    ``born_timestamp`` the store time unless given; no offsets yet."""
    stored = now_ms()
    return model_new(
        Message,
        topic=topic,
        queue_id=queue_id,
        msg_id=msg_id,
        tags=tags,
        keys=keys,
        body=body,
        body_is_text=body_is_text,
        properties=properties or {},
        sys_flag=sys_flag,
        producer_group=producer_group,
        message_group=message_group,
        born_timestamp=born_timestamp if born_timestamp is not None else stored,
        store_timestamp=stored,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def message_put(
    *,
    topic: str,
    queue_id: int,
    msg_id: str,
    body: bytes,
    body_is_text: bool = True,
    tags: str = "",
    keys: str = "",
    properties: dict[str, Any] | None = None,
    sys_flag: int = 0,
    producer_group: str = "",
    born_timestamp: int | None = None,
    prepared_transaction_offset: int | None = None,
    system_queue_nums: int | None = None,
) -> Message:
    """Append one message to the commit log and its queue; return it with its offsets.

    Must run inside ``transaction.atomic()``. ``born_timestamp`` defaults to the store time (ms).
    ``system_queue_nums``: for a broker-owned topic (half, Op, discard, DLQ), create it with that
    many queues (at least ``queue_id + 1``) if the queue does not exist yet.

    Raises:
        LookupError: the queue does not exist (and ``system_queue_nums`` is None).
        IntegrityError: ``prepared_transaction_offset`` was already delivered.
    """
    message = message_new(
        topic=topic,
        queue_id=queue_id,
        msg_id=msg_id,
        body=body,
        body_is_text=body_is_text,
        tags=tags,
        keys=keys,
        properties=properties,
        sys_flag=sys_flag,
        producer_group=producer_group,
        born_timestamp=born_timestamp,
        prepared_transaction_offset=prepared_transaction_offset,
    )
    try:
        _append(message)
    except LookupError:  # raised before anything was written: the transaction is still usable
        if system_queue_nums is None:
            raise
        system_topic_ensure(topic, max(system_queue_nums, queue_id + 1))
        _append(message)
    message_visible_on_commit(topic)
    return message


def messages_store(messages: Sequence[Message]) -> None:
    """Append ``messages`` (unsaved, as ``message_new`` makes them; msg_ids distinct) to the
    commit log and their queues, all or none; set each one's offsets. Their topics' long polls
    are woken once the database transaction commits (``message_visible_on_commit``).

    One statement appends them all (``messages_append_cte``, all or none): its own database
    transaction outside a caller's transaction (no BEGIN/COMMIT round trips, the queues'
    counters locked only while it runs), else inside a savepoint.

    Raises:
        LookupError: a queue does not exist; nothing stored.
    """
    if not messages:
        return
    cte, params = messages_append_cte(messages, name="appended")
    own = connection.in_atomic_block
    with transaction.atomic() if own else nullcontext(), statement_cursor() as cursor:
        cursor.execute(
            f"WITH {cte} SELECT msg_id, commit_log_offset, queue_offset FROM appended", params
        )
        stored = {row[0]: row[1:] for row in cursor.fetchall()}
        if len(stored) < len(messages):
            missing = sorted(
                {f"{m.topic}#{m.queue_id}" for m in messages if m.msg_id not in stored}
            )
            raise LookupError(f"no queue {', '.join(missing)}")
    for message in messages:
        message.commit_log_offset, message.queue_offset = stored[message.msg_id]
        message._state.adding = False
        message._state.db = connection.alias
    for topic in sorted({message.topic for message in messages}):
        message_visible_on_commit(topic)


def message_visible_on_commit(topic: str) -> None:
    """Wake the long polls waiting on ``topic`` once the current database transaction commits
    (``broker.plumbing.wakeups``, one publish per transaction): a message appended to a topic
    consumers receive from becomes visible at that commit. Half, Op and discarded messages
    (``is_undeliverable_topic``) wake nobody. Every append to the commit log calls this."""
    if not is_undeliverable_topic(topic):
        wakeup_on_commit(topic_channel(topic))


def message_copy(
    source: Message,
    *,
    topic: str,
    queue_id: int,
    properties: dict[str, str] | None = None,
    sys_flag: int = 0,
    prepared_transaction_offset: int | None = None,
    system_queue_nums: int | None = None,
) -> Message:
    """Append a copy of a stored message to ``(topic, queue_id)``; return the copy.

    The copy keeps the source's msg_id (UNIQ_KEY), body (and whether it was sent as text), tags,
    keys, producer group and ``born_timestamp``; it gets a new commit log and queue offset and
    store time. This is how RocketMQ moves a message between topics without changing what the
    producer sent: the commit of a half message to its real topic
    (``EndTransactionProcessor.endMessageTransaction``), the discard copy on
    ``TRANS_CHECK_MAX_TIME_TOPIC`` (``resolveDiscardMsg``), the re-appended half message of
    ``resumeCheckHalfMessage`` and the move to ``%DLQ%{group}``.

    Args:
        source: the stored message to copy (e.g. the half message).
        topic, queue_id: where the copy goes.
        properties: the copy's properties; None keeps the source's unchanged.
        sys_flag: the copy's ``MessageSysFlag`` transaction bits (0: not transactional).
        prepared_transaction_offset: for a commit, the half message's commit log offset (unique:
            a second delivery of the same half message raises IntegrityError).
        system_queue_nums: as ``message_put`` (create a broker-owned topic on first use).

    Must run inside ``transaction.atomic()``.

    Raises:
        LookupError, IntegrityError: as ``message_put``.
    """
    return message_put(
        topic=topic,
        queue_id=queue_id,
        msg_id=source.msg_id,
        body=bytes(source.body),
        body_is_text=source.body_is_text,
        tags=source.tags,
        keys=source.keys,
        properties=dict(source.properties) if properties is None else properties,
        sys_flag=sys_flag,
        producer_group=source.producer_group,
        born_timestamp=source.born_timestamp,
        prepared_transaction_offset=prepared_transaction_offset,
        system_queue_nums=system_queue_nums,
    )


# Take the queue offset and insert in one statement (one round trip, and the counter row is
# locked only from here to COMMIT). No queue row: no insert, no row returned.
_APPEND_SQL = (
    "WITH slot AS (UPDATE broker_consumequeue SET max_offset = max_offset + 1 "
    "WHERE topic = %s AND queue_id = %s RETURNING max_offset - 1 AS queue_offset) "
    f"INSERT INTO broker_message ({', '.join(MESSAGE_COLUMNS)}, queue_offset) "
    f"SELECT {', '.join(['%s'] * len(MESSAGE_COLUMNS))}, slot.queue_offset FROM slot "
    "RETURNING commit_log_offset, queue_offset"
)


def _append(message: Message) -> None:
    """Store ``message`` at the next offset of its queue; set its queue and commit log offsets.

    Values go through the model fields' own database preparation (JSON, bytes), so the same
    row results as from ``Message.objects.create``.

    Raises:
        LookupError: the queue does not exist (nothing was written).
    """
    values = [
        Message._meta.get_field(name).get_db_prep_save(getattr(message, name), connection)
        for name in MESSAGE_COLUMNS
    ]
    with connection.cursor() as cursor:
        cursor.execute(_APPEND_SQL, [message.topic, message.queue_id, *values])
        row = cursor.fetchone()
    if row is None:
        raise LookupError(f"no queue {message.topic}#{message.queue_id}")
    message.commit_log_offset, message.queue_offset = row
    message._state.adding = False
    message._state.db = connection.alias

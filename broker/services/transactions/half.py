"""Half messages (RocketMQ TransactionalMessageServiceImpl.prepareMessage,
TransactionalMessageBridge): a producer's send of a half message, alone or in a batch.

The end of a transaction is ``broker.services.transactions.end``; how a transaction is resolved
or discarded, and how its changes are journalled and announced, ``broker.services.transactions.resolution``.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction

from broker.conf import conf
from broker.constants import (
    HALF_TOPIC,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_TRANSACTION_PREPARED_TYPE,
)
from broker.errors import Conflict, InvalidInput
from broker.lookups import producer_group_require
from broker.models import Message, Transaction, model_new
from broker.plumbing.sql import rows_cte, statement_cursor
from broker.rules.checks import (
    MAX_CHECK_IMMUNITY_SECONDS,
    check_immunity_ms,
    check_immunity_valid,
)
from broker.services.commitlog.messages import producer_topic_get, queue_select
from broker.services.commitlog.statements import messages_append_cte
from broker.services.commitlog.storage import message_new, message_put, new_msg_id
from broker.services.commitlog.validation import message_type_check, message_validate
from broker.services.transactions.events import transactions_announce


def half_queue_select(transaction_id: str) -> int:
    """The half queue (and matching Op queue) of a transaction: CRC32 of its id modulo
    ``HALFMOON_HALF_QUEUE_NUMS``. Salted so it does not correlate with the real queue."""
    return zlib.crc32(b"half:" + transaction_id.encode()) % conf.half_queue_nums


class HalfPlan(NamedTuple):
    """A half message and its transaction row, checked and built but not stored yet
    (``transaction_plan``)."""

    half: Message
    tx: Transaction


def transaction_plan(
    *,
    producer_group: str,
    topic: str,
    body: bytes,
    body_is_text: bool = True,
    tags: str = "",
    keys: str = "",
    properties: dict[str, Any] | None = None,
    msg_id: str | None = None,
    check_immunity_seconds: int | None = None,
    producer_client_id: str = "",
) -> HalfPlan:
    """Check a half message and build it and its transaction row, unsaved: every rule of a
    send that needs no write (``transaction_prepare``'s arguments and errors).

    The real topic and queue go into the properties (REAL_TOPIC, REAL_QID), as RocketMQ's
    ``TransactionalMessageBridge.parseHalfMessageInner`` does. The first check is due
    ``HALFMOON_TRANSACTION_TIMEOUT_MS`` after birth, or ``check_immunity_seconds`` if that is
    longer (a shorter one is raised to the timeout; above 3600 s is refused, as RocketMQ 5's
    proxy). Without ``msg_id`` a new one is made (``new_msg_id``).

    Raises:
        NotFound: ``producer_group_not_found``, ``topic_not_found``.
        Forbidden: ``system_topic``.
        InvalidInput, TooLarge: bad immunity, body or properties; ``message_type_mismatch``
            when the topic does not accept TRANSACTION messages (``message_type_check``).
    """
    props = message_validate(body=body, properties=properties)
    if check_immunity_seconds is not None and not check_immunity_valid(check_immunity_seconds):
        raise InvalidInput(
            f"check_immunity_seconds must be between 0 and {MAX_CHECK_IMMUNITY_SECONDS}.",
            code="invalid_check_immunity",
            details={"check_immunity_seconds": check_immunity_seconds},
        )
    immunity_ms = check_immunity_ms(
        transaction_timeout_ms=conf.transaction_timeout_ms,
        immunity_seconds=check_immunity_seconds,
    )
    producer_group_require(producer_group)
    topic_obj = producer_topic_get(topic)
    message_type_check(topic_obj, transactional=True)
    transaction_id = msg_id or new_msg_id()
    real_queue_id = queue_select(transaction_id, topic_obj.queue_nums)
    props.update(
        {
            PROPERTY_REAL_TOPIC: topic,
            PROPERTY_REAL_QUEUE_ID: str(real_queue_id),
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_PRODUCER_GROUP: producer_group,
            PROPERTY_UNIQ_KEY: transaction_id,
        }
    )
    if check_immunity_seconds is not None:
        props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(check_immunity_seconds)
    half_queue_id = half_queue_select(transaction_id)
    half = message_new(
        topic=HALF_TOPIC,
        queue_id=half_queue_id,
        msg_id=transaction_id,
        body=body,
        body_is_text=body_is_text,
        tags=tags,
        keys=keys,
        properties=props,
        sys_flag=SYS_FLAG_TRANSACTION_PREPARED_TYPE,
        producer_group=producer_group,
    )
    tx = model_new(
        Transaction,
        transaction_id=transaction_id,
        producer_group=producer_group,
        topic=topic,
        queue_id=real_queue_id,
        tags=tags,
        keys=keys,
        half_queue_id=half_queue_id,
        check_immunity_ms=immunity_ms,
        born_timestamp=half.born_timestamp,
        next_check_timestamp=half.born_timestamp + immunity_ms,
        producer_client_id=producer_client_id,
    )
    return HalfPlan(half, tx)


def transaction_prepare(
    *,
    producer_group: str,
    topic: str,
    body: bytes,
    body_is_text: bool = True,
    tags: str = "",
    keys: str = "",
    properties: dict[str, Any] | None = None,
    msg_id: str | None = None,
    check_immunity_seconds: int | None = None,
    producer_client_id: str = "",
) -> tuple[Transaction, bool]:
    """Store a half message on ``RMQ_SYS_TRANS_HALF_TOPIC``, invisible to consumers.

    Args:
        producer_group: the sending producer group (must exist).
        topic: the real topic the message goes to on commit (must exist; not a system topic).
        body: the decoded body, at most ``HALFMOON_MAX_MESSAGE_SIZE`` bytes.
        body_is_text: whether the producer sent it as text (``body``) rather than base64
            (``body_base64``); kept with the message, the API gives it back the same way.
        tags, keys: RocketMQ's TAGS and KEYS (space-separated), at most 255 and 1024
            characters (their columns').
        properties: user properties, string to string, at most ``HALFMOON_MAX_PROPERTIES_SIZE``
            bytes of UTF-8 all together; none of the keys the broker owns.
        msg_id: the message id (UNIQ_KEY), which is the transaction id; None makes a new one
            (32 upper-case hex characters).
        check_immunity_seconds: seconds (0 to 3600) before the first back-check, if longer
            than ``HALFMOON_TRANSACTION_TIMEOUT_MS``; None: that timeout.
        producer_client_id: the RocketMQ client (``x-mq-client-id``) sending over gRPC, whose
            back-checks then go over its telemetry stream; "" over HTTP.

    Idempotent by ``msg_id`` (= transaction id): the same id again for the same group returns
    the stored transaction and stores nothing.

    Returns:
        (transaction, created): created is False when the msg_id was already stored.

    Raises:
        NotFound: ``producer_group_not_found``, ``topic_not_found``.
        Forbidden: ``system_topic``.
        Conflict: ``duplicate_msg_id`` (the msg_id belongs to another producer group).
        InvalidInput, TooLarge: bad immunity, body or properties.
    """
    plan = transaction_plan(
        producer_group=producer_group,
        topic=topic,
        body=body,
        body_is_text=body_is_text,
        tags=tags,
        keys=keys,
        properties=properties,
        msg_id=msg_id,
        check_immunity_seconds=check_immunity_seconds,
        producer_client_id=producer_client_id,
    )
    try:
        if connection.in_atomic_block:  # a caller's transaction: a failed insert must not end it
            with transaction.atomic():
                transactions_store([plan])
        else:
            transactions_store([plan])
    except IntegrityError:
        # The msg_id is stored already (a retry, or a concurrent send that won): the half
        # message written with the failed insert rolled back with it; answer the stored one.
        existing = Transaction.objects.filter(pk=plan.tx.transaction_id).first()
        if existing is None:
            raise
        return transaction_prepare_repeat(existing, plan.tx.producer_group), False
    return plan.tx, True


def transactions_store(plans: Sequence[HalfPlan]) -> None:
    """Store the half messages of ``plans`` (``transaction_plan``; msg_ids distinct) with their
    transaction rows, and announce each ``prepared`` once the database transaction commits.
    Sets each transaction's ``half_queue_offset`` and ``half_commit_log_offset``.

    One statement stores them all (``_store_statement``, all or none): its own database
    transaction outside a caller's transaction (no BEGIN/COMMIT round trips; the half queues'
    counters are locked only while it runs), else inside a savepoint. When a half queue does
    not exist yet (``message_put`` creates it), one database transaction of a ``message_put``
    and an insert per plan.

    Raises:
        IntegrityError: a msg_id (or a half queue offset) is stored already; nothing stored.
    """
    if not plans:
        return
    with transaction.atomic() if connection.in_atomic_block else nullcontext():
        stored = _store_statement(plans)
    if not stored:
        with transaction.atomic():
            for half, tx in plans:
                message = message_put(
                    system_queue_nums=conf.half_queue_nums,
                    topic=half.topic,
                    queue_id=half.queue_id,
                    msg_id=half.msg_id,
                    body=half.body,
                    body_is_text=half.body_is_text,
                    tags=half.tags,
                    keys=half.keys,
                    properties=half.properties,
                    sys_flag=half.sys_flag,
                    producer_group=half.producer_group,
                    born_timestamp=half.born_timestamp,
                )
                tx.half_queue_offset = message.queue_offset
                tx.half_commit_log_offset = message.commit_log_offset
                tx.save(force_insert=True)
    transactions_announce([plan.tx for plan in plans], "prepared")


def _store_statement(plans: Sequence[HalfPlan]) -> bool:
    """Insert the half messages of ``plans`` (``messages_append_cte``) and their transaction
    rows, with the half messages' offsets, in one statement. Returns False, with nothing
    written, when a half queue does not exist yet.

    Raises:
        IntegrityError: a msg_id (or a half queue offset) is stored already; nothing stored.
    """
    cte, params = messages_append_cte([plan.half for plan in plans], name="half")
    attnames, item_columns, insert = _transaction_insert()
    items, item_params = rows_cte(
        "tx_items", item_columns, [[getattr(p.tx, a) for a in attnames] for p in plans]
    )
    params += item_params
    sql = f"WITH {cte}, {items} {insert}"
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if len(rows) < len(plans):
        return False
    stored = {row[0]: row[1:] for row in rows}
    for _, tx in plans:
        tx.half_queue_offset, tx.half_commit_log_offset = stored[tx.transaction_id]
        tx._state.adding = False
        tx._state.db = connection.alias
    return True


# The transaction row's columns that come from the half message stored in the same statement.
_HALF_OFFSET_COLUMNS = {
    "half_queue_offset": "queue_offset",
    "half_commit_log_offset": "commit_log_offset",
}


@functools.cache
def _transaction_insert() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], str]:
    """``_store_statement``'s constant parts, worked out once per process: the attribute names
    of the transaction columns sent as ``tx_items``, their ``rows_cte`` columns (name, SQL
    type), and the final ``INSERT ... SELECT ... RETURNING`` reading ``tx_items`` and ``half``."""
    fields = [f for f in Transaction._meta.concrete_fields if f.attname not in _HALF_OFFSET_COLUMNS]
    columns = [connection.ops.quote_name(f.column) for f in fields]
    offsets = ", ".join(f"half.{source}" for source in _HALF_OFFSET_COLUMNS.values())
    insert = (
        f"INSERT INTO {Transaction._meta.db_table} "
        f"({', '.join(columns)}, {', '.join(_HALF_OFFSET_COLUMNS)}) "
        f"SELECT {', '.join(f't.{c}' for c in columns)}, {offsets} FROM tx_items t "
        "JOIN half ON half.msg_id = t.transaction_id "
        f"RETURNING transaction_id, {', '.join(_HALF_OFFSET_COLUMNS)}"
    )
    return (
        tuple(f.attname for f in fields),
        tuple((f.column, f.db_type(connection)) for f in fields),
        insert,
    )


def transaction_prepare_repeat(existing: Transaction, producer_group: str) -> Transaction:
    """The answer to a half message sent again with a stored msg_id: the stored transaction
    ``existing``, if ``producer_group`` sent it (idempotent send).

    Raises:
        Conflict: ``duplicate_msg_id``: another producer group's msg_id.
    """
    if existing.producer_group != producer_group:
        raise Conflict(
            f"msg_id {existing.transaction_id} was already sent by another producer group.",
            code="duplicate_msg_id",
            details={"msg_id": existing.transaction_id},
        )
    return existing

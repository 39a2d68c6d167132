"""What a receive hands out and journals: ``Received`` (a message with its receipt handle
and attempt), receipt handles, and the delivery journal's rows (``DeliveryEvent``), built as
models or by SQL (one bulk insert or one statement per call)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.db import connection

from broker.models import DeliveryEvent, Message


@dataclass(frozen=True)
class Received:
    """One message handed to a receiver, with its receipt handle and attempt number."""

    message: Message
    delivery_attempt: int
    receipt_handle: str


def receipt_handle_new() -> str:
    """A new receipt handle: 32 URL-safe characters (24 random bytes), unguessable, so a
    handle names one hand-out of one delivery (``Delivery.receipt_handle``, at most 64)."""
    return secrets.token_urlsafe(24)


def journal_entry(
    *, group: str, message: Message, kind: str, attempt: int, now: int
) -> DeliveryEvent:
    """The delivery journal row (not saved) saying ``message`` was handed to, acked by or
    dead-lettered for ``group`` at ``now`` (ms), at delivery attempt ``attempt``."""
    return DeliveryEvent(
        consumer_group=group,
        topic=message.topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        commit_log_offset=message.commit_log_offset,
        msg_id=message.msg_id,
        kind=kind,
        delivery_attempt=attempt,
        timestamp=now,
    )


def journal_insert_sql(source: str, *, attempt: str, order: str) -> str:
    """The delivery journal's insert (``journal_entry``'s row) of every message
    row of the CTE ``source`` (its ``topic``, ``queue_id``, ``queue_offset``,
    ``commit_log_offset`` and ``msg_id``), for the group ``%(group)s``, of kind ``%(kind)s`` at
    ``%(now)s`` (ms); ``attempt`` and ``order`` are SQL expressions over ``source``."""
    qn = connection.ops.quote_name
    return (
        f"INSERT INTO {DeliveryEvent._meta.db_table} (consumer_group, topic, queue_id, "
        f"queue_offset, commit_log_offset, msg_id, kind, delivery_attempt, {qn('timestamp')}) "
        "SELECT %(group)s, topic, queue_id, queue_offset, commit_log_offset, msg_id, %(kind)s, "
        f"{attempt}, %(now)s FROM {source} ORDER BY {order}"
    )

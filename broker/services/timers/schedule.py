"""Sending a delay or timer message (RocketMQ ``HookUtils.transformTimerMessage``): a future
delivery time waits on ``RMQ_SYS_WHEEL_TIMER``, a past or present one is a normal send."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from broker.conf import conf
from broker.constants import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
)
from broker.errors import InvalidInput
from broker.models import Message, ScheduledMessage
from broker.plumbing.wakeups import timers_channel, wakeup_on_commit
from broker.rules.clock import now_ms
from broker.rules.timers import DeliveryTimeError, delay_level_ms, is_scheduled
from broker.services.commitlog.messages import message_plan, message_send
from broker.services.commitlog.storage import message_new, messages_store, system_topic_ensure
from broker.services.commitlog.validation import message_type_resolve


def delivery_timestamp_of(*, deliver_at: int | None, delay_level: int | None, now: int) -> int:
    """The due time (ms) of a send given ``deliver_at`` (ms since the epoch) or a RocketMQ
    ``delay_level`` (1..18, ``broker.rules.timers.DELAY_LEVELS_MS``) counted from ``now``.

    Raises:
        InvalidInput: ``illegal_delay_level``; ``delivery_time_conflict`` when both are given.
    """
    if deliver_at is not None and delay_level is not None:
        raise InvalidInput(
            "Give deliver_at or delay_level, not both.", code="delivery_time_conflict"
        )
    if delay_level is None:
        return int(deliver_at) if deliver_at is not None else now
    try:
        return now + delay_level_ms(delay_level)
    except DeliveryTimeError as exc:
        raise InvalidInput(str(exc), code=exc.code, details={"delay_level": delay_level}) from None


def message_send_at(*, delivery_timestamp: int, **send: Any) -> Message | ScheduledMessage:
    """Send a message due at ``delivery_timestamp`` (ms since the epoch).

    A time now or past is a normal send (``message_send``, returns the ``Message``). A later
    one is stored durably now, invisible, on ``RMQ_SYS_WHEEL_TIMER`` queue 0 with
    ``REAL_TOPIC``, ``REAL_QID`` and ``TIMER_DELIVER_MS``, beside its ``ScheduledMessage``
    index row, in one database transaction (returns the row); the timer delivers it on its
    topic when due (``broker.services.timers.deliver``) and is woken on commit. With
    ``msg_id``, a resend of one already scheduled by the same producer group returns it,
    also once its time has come (a client's retry of a send answered late is never a copy).

    Args:
        send: ``message_plan``'s keyword arguments.

    Its type is DELAY whether due or not: a topic whose ``message_type`` is not DELAY or MIXED
    refuses it (``message_type_mismatch``), as RocketMQ's proxy does before the broker reads
    the time.

    Raises:
        InvalidInput: ``illegal_delivery_time``, due more than ``HALFMOON_TIMER_MAX_DELAY_SEC``
            ahead (RocketMQ ``timerMaxDelaySec``); ``message_type_conflict`` with a
            ``message_group`` (a message is FIFO or DELAY, not both); ``message_send``'s errors.
    """
    # A FIFO message with a time is refused as such, whether or not the time is legal.
    message_type_resolve(
        delivery_timestamp=delivery_timestamp, message_group=send.get("message_group") or ""
    )
    now = now_ms()
    try:
        scheduled = is_scheduled(
            delivery_timestamp, now=now, max_delay_ms=conf.timer_max_delay_sec * 1000
        )
    except DeliveryTimeError as exc:
        raise InvalidInput(
            str(exc),
            code=exc.code,
            details={
                "delivery_timestamp": delivery_timestamp,
                "max_delay_seconds": conf.timer_max_delay_sec,
            },
        ) from None
    send = {**send, "delivery_timestamp": delivery_timestamp}  # a DELAY message, due or not
    if not scheduled and send.get("msg_id") is None:
        return message_send(**send)
    message = message_plan(**send)
    with transaction.atomic():
        if send.get("msg_id") is not None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [message.msg_id]
                )
            stored = ScheduledMessage.objects.filter(
                msg_id=message.msg_id,
                topic=message.topic,
                producer_group=message.producer_group,
            ).first()
            if stored is not None:  # a resend, also once its time has come
                return stored
        if not scheduled:
            return message_send(**send)  # the same lock again: held by this transaction
        waiting = message_new(
            topic=TIMER_TOPIC,
            queue_id=0,
            msg_id=message.msg_id,
            body=bytes(message.body),
            body_is_text=message.body_is_text,
            tags=message.tags,
            keys=message.keys,
            properties={
                **message.properties,
                PROPERTY_REAL_TOPIC: message.topic,
                PROPERTY_REAL_QUEUE_ID: str(message.queue_id),
                PROPERTY_TIMER_DELIVER_MS: str(delivery_timestamp),
            },
            producer_group=message.producer_group,
        )
        try:
            messages_store([waiting])  # inside a savepoint: a LookupError leaves nothing
        except LookupError:  # the first delay message of this database
            system_topic_ensure(TIMER_TOPIC, 1)
            messages_store([waiting])
        row = ScheduledMessage.objects.create(
            commit_log_offset=waiting.commit_log_offset,
            msg_id=message.msg_id,
            topic=message.topic,
            queue_id=message.queue_id,
            tags=message.tags,
            keys=message.keys,
            producer_group=message.producer_group,
            delivery_timestamp=delivery_timestamp,
            scheduled_timestamp=waiting.store_timestamp,
        )
        wakeup_on_commit(timers_channel())
    return row


def message_send_timed(
    *, deliver_at: int | None = None, delay_level: int | None = None, **send: Any
) -> Message | ScheduledMessage:
    """A send that may name its delivery time (api-v1 ``POST /messages`` and each item of
    ``POST /messages/batch``): ``message_send`` when neither ``deliver_at`` (ms since the
    epoch) nor ``delay_level`` (1..18) is given, else ``message_send_at`` at the time
    ``delivery_timestamp_of`` gives (a ``ScheduledMessage`` while it waits).

    Raises:
        InvalidInput: ``delivery_time_conflict``, ``illegal_delay_level``,
            ``illegal_delivery_time``; and ``message_send``'s errors.
    """
    if deliver_at is None and delay_level is None:
        return message_send(**send)
    due = delivery_timestamp_of(deliver_at=deliver_at, delay_level=delay_level, now=now_ms())
    return message_send_at(delivery_timestamp=due, **send)

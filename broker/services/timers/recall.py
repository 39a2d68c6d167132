"""Recall (RocketMQ 5.3 ``RecallMessage``): a scheduled message taken back before it is due is
never delivered. Who may recall which message (``scheduled_message_recall_check``) is decided
here for every interface: gRPC's RecallMessage, the HTTP API and (by its own grants) the
console."""

from __future__ import annotations

from django.db import transaction

from broker.constants import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_TOPIC,
)
from broker.errors import Conflict, Forbidden, InvalidInput, not_found
from broker.models import AuditEntry, AuditTarget, Message, ScheduledMessage
from broker.rules.clock import now_ms
from broker.rules.grants import OperatorScope
from broker.rules.timers import RecallHandle, recall_handle_parse, timer_del_uniq_key
from broker.selectors.scheduled_messages import scheduled_message_find, scheduled_message_of
from broker.services.access.callers import Caller
from broker.services.commitlog.storage import (
    message_new,
    messages_store,
    new_msg_id,
    system_topic_ensure,
)
from broker.services.operations.audit import actor_checked, audit_entry_record, reason_checked
from broker.services.topology import clients

RECALL_REASON_MAX = 500
"""The longest recall reason kept on the row (the audit entry keeps the operator's whole)."""


def recall_handle_read(topic: str, recall_handle: str) -> RecallHandle:
    """The parts of ``recall_handle``, which must name ``topic``.

    Raises:
        InvalidInput: ``invalid_recall_handle`` (not a recall handle, or of another topic).
    """
    try:
        handle = recall_handle_parse(recall_handle)
    except ValueError:
        raise InvalidInput("The recall handle is invalid.", code="invalid_recall_handle") from None
    if handle.topic != topic:
        raise InvalidInput(
            f"The recall handle is for topic {handle.topic}, not {topic}.",
            code="invalid_recall_handle",
            details={"topic": topic, "handle_topic": handle.topic},
        )
    return handle


def scheduled_message_recall_check(
    caller: Caller, *, topic: str, msg_id: str, operates: OperatorScope | None = None
) -> None:
    """Raises Forbidden unless ``caller`` may recall the scheduled message ``msg_id`` of
    ``topic``: it may act for the producer group the message was sent as, or would send it as
    that group itself (``clients.grpc_sender_group``: a key that may send but not as a
    group's producer sends, and so recalls, messages of no group), or, for an operator's recall, ``operates`` that producer
    group (its operator grants). Nothing when there is no such message (the recall says
    ``scheduled_message_not_found``). The one rule of gRPC's RecallMessage and the API's
    recalls."""
    row = scheduled_message_find(topic=topic, msg_id=msg_id)
    if row is None:
        return
    group = row.producer_group
    if caller.may_produce(group):
        return
    if operates is not None and operates.may_operate_producer_group(group):
        return
    if caller.may_send() and group == clients.grpc_sender_group(caller=caller, topic=topic):
        return
    raise Forbidden(
        f"This access key may not recall messages of producer group {group}.",
        details={"producer_group": group, "topic": topic},
    )


def scheduled_message_recall_by_handle(
    *, caller: Caller, topic: str, recall_handle: str, recalled_by: str
) -> ScheduledMessage:
    """A producer's recall (gRPC RecallMessage, ``POST /api/v1/scheduled-messages/recall``):
    the message ``recall_handle`` names, of ``topic``, taken back as ``recalled_by`` if
    ``caller`` may (``scheduled_message_recall_check``); not audited.

    Raises:
        InvalidInput: ``invalid_recall_handle``. Forbidden. And ``scheduled_message_recall``'s
            NotFound and Conflict.
    """
    handle = recall_handle_read(topic, recall_handle)
    scheduled_message_recall_check(caller, topic=topic, msg_id=handle.msg_id)
    return scheduled_message_recall(topic=topic, msg_id=handle.msg_id, recalled_by=recalled_by)


def scheduled_message_recall_by_operator(
    *,
    caller: Caller,
    operates: OperatorScope,
    msg_id: str,
    reason: str | None,
    actor: str,
    via: str = AuditEntry.Via.API,
) -> ScheduledMessage:
    """An operator's recall through the API (``POST /api/v1/scheduled-messages/{msg_id}/
    recall``): the latest scheduled message of ``msg_id`` (any topic), taken back as ``actor``
    with ``reason``, audited, if ``caller`` may recall it or ``operates`` its producer group
    (``scheduled_message_recall_check``).

    Raises:
        NotFound: ``scheduled_message_not_found``. Forbidden. Conflict: ``recall_too_late``.
        InvalidInput: ``reason_required``, ``reason_too_long``.
    """
    row = scheduled_message_of(msg_id)
    if row is None:
        raise not_found("scheduled_message", msg_id)
    scheduled_message_recall_check(caller, topic=row.topic, msg_id=msg_id, operates=operates)
    return scheduled_message_recall(
        topic=row.topic, msg_id=msg_id, recalled_by=actor, reason=reason or "", via=via
    )


def scheduled_message_recall(
    *,
    topic: str,
    msg_id: str,
    recalled_by: str,
    reason: str = "",
    via: str | None = None,
) -> ScheduledMessage:
    """Take back the scheduled message ``msg_id`` of ``topic`` before it is due: it becomes
    RECALLED and is never delivered (the timer skips it: both lock the row). Recalling a
    recalled one again returns it unchanged.

    ``recalled_by`` names who: a producer (``grpc:<client id>``, ``producer:<key name>``) or
    an operator (``console:<user>``, ``operator:<key name>``), who also gives ``via`` (an
    ``AuditEntry.Via``) and a ``reason``; an operator's recall is written to the audit log
    in the same database transaction, as is the recall's delete marker on the timer topic
    (``recall_marker_store``).

    Raises:
        NotFound: ``scheduled_message_not_found``.
        Conflict: ``recall_too_late``, the message is due or delivered (RocketMQ: "recall
            failed, timestamp invalid"); ``details`` has its ``state`` and
            ``delivery_timestamp``.
        InvalidInput: ``reason_required``, ``reason_too_long`` (an operator's).
    """
    actor_checked(recalled_by)
    if via is not None:
        reason = reason_checked(reason)
    with transaction.atomic():
        row = (
            ScheduledMessage.objects.select_for_update()
            .filter(topic=topic, msg_id=msg_id)
            .order_by("-commit_log_offset")
            .first()
        )
        if row is None:
            raise not_found("scheduled_message", msg_id)
        if row.state == ScheduledMessage.State.RECALLED:
            return row
        now = now_ms()
        if row.state == ScheduledMessage.State.DELIVERED or row.delivery_timestamp <= now:
            raise Conflict(
                f"Message {msg_id} was due at {row.delivery_timestamp}: too late to recall.",
                code="recall_too_late",
                details={
                    "msg_id": msg_id,
                    "topic": topic,
                    "state": row.state,
                    "delivery_timestamp": row.delivery_timestamp,
                },
            )
        row.state = ScheduledMessage.State.RECALLED
        row.ended_timestamp = now
        row.recalled_by = recalled_by
        row.recall_reason = reason[:RECALL_REASON_MAX]
        row.save(update_fields=["state", "ended_timestamp", "recalled_by", "recall_reason"])
        recall_marker_store(row)
        if via is not None:
            audit_entry_record(
                action=AuditEntry.Action.RECALL_MESSAGE,
                actor=recalled_by,
                via=via,
                reason=reason,
                state=AuditEntry.State.DONE,
                result="recalled",
                targets={
                    row.commit_log_offset: (
                        AuditTarget.Result.DONE,
                        {"msg_id": msg_id, "topic": topic, "due": row.delivery_timestamp},
                    )
                },
                scope={"topic": topic, "msg_id": msg_id},
            )
    return row


def recall_marker_store(row: ScheduledMessage) -> Message:
    """Append the recall of ``row`` to the commit log, as RocketMQ 5.3's RecallMessage does: a
    delete marker on ``RMQ_SYS_WHEEL_TIMER`` queue 0, its own msg_id, an empty body, with
    ``TIMER_DEL_UNIQKEY`` ``"<topic>+<msg_id>"`` and the recalled message's ``REAL_TOPIC``,
    ``REAL_QID`` and ``TIMER_DELIVER_MS``. Call it inside the recall's database transaction:
    the archive (which exports the commit log, not the index rows) then holds the recall
    exactly when the database does. No consumer reads the timer topic and the timer moves only
    index rows, so the marker is never delivered. Returns the stored marker."""
    marker = message_new(
        topic=TIMER_TOPIC,
        queue_id=0,
        msg_id=new_msg_id(),
        body=b"",
        properties={
            PROPERTY_REAL_TOPIC: row.topic,
            PROPERTY_REAL_QUEUE_ID: str(row.queue_id),
            PROPERTY_TIMER_DELIVER_MS: str(row.delivery_timestamp),
            PROPERTY_TIMER_DEL_UNIQKEY: timer_del_uniq_key(row.topic, row.msg_id),
        },
        producer_group=row.producer_group,
    )
    try:
        messages_store([marker])  # inside a savepoint: a LookupError leaves nothing
    except LookupError:  # the timer topic was deleted since the message was scheduled
        system_topic_ensure(TIMER_TOPIC, 1)
        messages_store([marker])
    return marker

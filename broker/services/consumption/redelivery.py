"""Making messages visible to one consumer group again: the upsert every consumer-group
operation that delivers again goes through (``messages_redeliver``: visible now, attempt 0, a
new receipt handle, journalled ``redelivery``), the check that an operator may operate a
group, and the resend of one message to one group (``message_resend``; rocketmq-dashboard's
"resend"). See docs/console.md, "Consumer groups"."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from django.db import connection, transaction

from broker.errors import Forbidden, not_found
from broker.lookups import consumer_group_by_name
from broker.models import AuditEntry, Delivery, DeliveryEvent, Message
from broker.plumbing.sql import statement_cursor
from broker.rules.clock import now_ms
from broker.rules.topics import is_undeliverable_topic
from broker.services.consumption.handouts import receipt_handle_new
from broker.services.operations.audit import actor_checked, audit_entry_record, reason_checked

_REDELIVER_CHUNK = 5_000  # messages per upsert statement (~0.1 s)


def consumer_group_checked(consumer_group: str, allowed: Collection[str] | None) -> str:
    """``consumer_group`` if it exists and the operator may operate it.

    Raises:
        NotFound: ``consumer_group_not_found``.
        Forbidden: ``consumer_group_outside_scope`` (a scoped operator, another group).
    """
    if consumer_group_by_name(consumer_group) is None:
        raise not_found("consumer_group", consumer_group)
    if allowed is not None and consumer_group not in allowed:
        raise Forbidden(
            f"You may not operate consumer group {consumer_group}.",
            code="consumer_group_outside_scope",
            details={"consumer_group": consumer_group},
        )
    return consumer_group


def messages_redeliver(consumer_group: str, message_ids: Sequence[int], now: int) -> int:
    """Make ``message_ids`` (commit log offsets) visible to ``consumer_group`` now: one
    ``Delivery`` each (``INSERT ... ON CONFLICT (consumer_group, message) DO UPDATE``), attempt
    0 (the next receive hands it out as attempt 1), a new receipt handle, journalled
    ``redelivery``. Must run inside the caller's ``transaction.atomic()``. A delivery locked
    by a concurrent receive is updated after that receive commits (its handle then fails).

    Returns:
        the messages made visible (those still stored).
    """
    deliveries, messages = Delivery._meta.db_table, Message._meta.db_table
    journal = DeliveryEvent._meta.db_table
    qn = connection.ops.quote_name
    sql = (
        f"WITH src AS (SELECT * FROM unnest(%(ids)s::bigint[], %(handles)s::text[]) "
        "AS s(message_id, handle)), "
        f"up AS (INSERT INTO {deliveries} (consumer_group, message_id, topic, delivery_attempt, "
        "invisible_until_timestamp, receipt_handle) SELECT %(group)s, m.commit_log_offset, "
        f"m.topic, 0, %(now)s, s.handle FROM src s JOIN {messages} m "
        "ON m.commit_log_offset = s.message_id ORDER BY m.commit_log_offset "
        "ON CONFLICT (consumer_group, message_id) DO UPDATE SET delivery_attempt = 0, "
        "invisible_until_timestamp = EXCLUDED.invisible_until_timestamp, "
        "receipt_handle = EXCLUDED.receipt_handle RETURNING message_id), "
        f"journalled AS (INSERT INTO {journal} (consumer_group, topic, queue_id, queue_offset, "
        f"commit_log_offset, msg_id, kind, delivery_attempt, {qn('timestamp')}) "
        "SELECT %(group)s, m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id, "
        f"%(kind)s, 0, %(now)s FROM up JOIN {messages} m ON m.commit_log_offset = up.message_id "
        "ORDER BY m.commit_log_offset) SELECT count(*) FROM up"
    )
    done = 0
    for start in range(0, len(message_ids), _REDELIVER_CHUNK):
        ids = list(message_ids[start : start + _REDELIVER_CHUNK])
        params = {
            "ids": ids,
            "handles": [receipt_handle_new() for _ in ids],
            "group": consumer_group,
            "now": now,
            "kind": DeliveryEvent.Kind.REDELIVERY.value,
        }
        with statement_cursor() as cursor:
            cursor.execute(sql, params)
            done += cursor.fetchone()[0]
    return done


def message_resend(
    *,
    consumer_group: str,
    commit_log_offset: int,
    reason: str | None,
    actor: str,
    via: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Deliver the message at ``commit_log_offset`` once more to ``consumer_group`` only:
    ``messages_redeliver`` of that one message (visible now, attempt 0, new handle, journalled
    ``redelivery``), audited ``resend-message`` (``done``; ``scope``: ``{consumer_group,
    commit_log_offset, msg_id, topic}``) in the same database transaction.

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``consumer_group_not_found``, ``message_not_found``.
        Forbidden: ``consumer_group_outside_scope``; ``system_topic`` (half, Op and discarded
            messages are never delivered).
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    group = consumer_group_checked(consumer_group, allowed_consumer_groups)
    message = Message.objects.filter(commit_log_offset=commit_log_offset).first()
    if message is None:
        raise not_found("message", str(commit_log_offset))
    if is_undeliverable_topic(message.topic):
        raise Forbidden(
            f"Messages of the system topic {message.topic} are never delivered.",
            code="system_topic",
            details={"topic": message.topic},
        )
    return one_resent_audited(
        group,
        message,
        action=AuditEntry.Action.RESEND_MESSAGE,
        actor=actor,
        via=via,
        reason=reason,
        result=f"message {message.msg_id} of {message.topic} delivered again to {group}",
        targets={},
        scope={
            "consumer_group": group,
            "commit_log_offset": message.commit_log_offset,
            "msg_id": message.msg_id,
            "topic": message.topic,
        },
    )


def one_resent_audited(
    consumer_group: str,
    message: Message,
    *,
    action: str,
    actor: str,
    via: str,
    reason: str,
    result: str,
    targets: dict[str | int, tuple[str, dict[str, Any]]],
    scope: dict[str, Any],
) -> AuditEntry:
    """``message`` made visible to ``consumer_group`` now (``messages_redeliver``) and its
    ``done`` audit entry (``audit_entry_record``), in one database transaction."""
    with transaction.atomic():
        messages_redeliver(consumer_group, [message.commit_log_offset], now_ms())
        return audit_entry_record(
            action=action,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=result,
            targets=targets,
            scope=scope,
        )

"""An operator's action on a FIFO consumer group's blocked message group
(``broker.selectors.blocked_message_groups``): its head sent to ``%DLQ%{group}`` now, with a
reason, so the messages behind it flow again. The move is the consumer's own dead-letter of a
delivery (``broker.services.consumption.deliveries.delivery_dead_letter``: the same copy and
``dead_lettered`` journal row), audited ``dead-letter-head`` in the same database transaction.
See docs/operations.md, "A FIFO message group is blocked".
"""

from __future__ import annotations

from collections.abc import Collection

from django.db import transaction

from broker.errors import Conflict, not_found
from broker.lookups import consumer_group_by_name
from broker.models import AuditEntry, AuditTarget, ConsumerGroup, Delivery
from broker.selectors.blocked_message_groups import BlockedMessageGroup, blocked_message_group_get
from broker.services.consumption.deliveries import delivery_dead_letter
from broker.services.consumption.redelivery import consumer_group_checked
from broker.services.operations.audit import actor_checked, audit_entry_record, reason_checked


def fifo_consumer_group_checked(consumer_group: str) -> ConsumerGroup:
    """The consumer group ``consumer_group`` if it consumes in FIFO order.

    Raises:
        NotFound: ``consumer_group_not_found``.
        Conflict: ``consumer_group_not_fifo`` (details ``consumer_group``).
    """
    group = consumer_group_by_name(consumer_group)
    if group is None:
        raise not_found("consumer_group", consumer_group)
    if not group.fifo:
        raise Conflict(
            f"Consumer group {consumer_group} is not FIFO: it has no blocked message groups.",
            code="consumer_group_not_fifo",
            details={"consumer_group": consumer_group},
        )
    return group


def _not_blocked(consumer_group: str, topic: str, message_group: str) -> Conflict:
    return Conflict(
        f"Message group {message_group} of {topic} is not blocked in consumer group "
        f"{consumer_group} (any more): its head was acked, dead-lettered or has not failed.",
        code="message_group_not_blocked",
        details={"consumer_group": consumer_group, "topic": topic, "message_group": message_group},
    )


def blocked_message_group_dead_letter(
    *,
    consumer_group: str,
    topic: str,
    message_group: str,
    msg_id: str | None,
    reason: str | None,
    actor: str,
    via: str,
    allowed_consumer_groups: Collection[str] | None = None,
) -> AuditEntry:
    """Send the head of the blocked message group ``message_group`` of ``topic`` in the FIFO
    consumer group to ``%DLQ%{group}`` now, whatever its attempt: its delivery is locked, then
    dead-lettered by ``delivery_dead_letter`` (a consumer holding it loses its receipt handle),
    and the action audited ``dead-letter-head`` (target: the head's commit log offset; scope
    ``{consumer_group, topic, message_group, msg_id, commit_log_offset}``), in one database
    transaction. ``msg_id``: the head the operator saw (None: whatever head is blocked now).

    Raises:
        InvalidInput: ``reason_required``, ``reason_too_long``.
        NotFound: ``consumer_group_not_found``.
        Forbidden: ``consumer_group_outside_scope``.
        Conflict: ``consumer_group_not_fifo``; ``message_group_not_blocked``;
            ``message_group_head_changed`` (details ``msg_id``: the head now, ``expected``).
    """
    actor = actor_checked(actor)
    reason = reason_checked(reason)
    name = consumer_group_checked(consumer_group, allowed_consumer_groups)
    group = fifo_consumer_group_checked(name)
    with transaction.atomic():
        head = _blocked_head(group, topic, message_group)
        if msg_id is not None and head.msg_id != msg_id:
            raise Conflict(
                f"The head of message group {message_group} of {topic} is now {head.msg_id}, "
                f"not {msg_id}: look again before sending it to the DLQ.",
                code="message_group_head_changed",
                details={"msg_id": head.msg_id, "expected": msg_id},
            )
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .filter(consumer_group=name, message_id=head.commit_log_offset)
            .first()
        )
        if delivery is None:  # acked or dead-lettered since it was read
            raise _not_blocked(name, topic, message_group)
        # Locked: no receive, ack or change moves it now; read it again as it stands.
        locked = _blocked_head(group, topic, message_group)
        if locked.commit_log_offset != head.commit_log_offset:
            raise _not_blocked(name, topic, message_group)
        delivery_dead_letter(consumer_group=name, receipt_handle=delivery.receipt_handle)
        return audit_entry_record(
            action=AuditEntry.Action.DEAD_LETTER_HEAD,
            actor=actor,
            via=via,
            reason=reason,
            state=AuditEntry.State.DONE,
            result=(
                f"head {locked.msg_id} of message group {message_group} of {topic} moved to "
                f"%DLQ%{name} at attempt {locked.delivery_attempt}"
            ),
            targets={
                locked.commit_log_offset: (
                    AuditTarget.Result.DONE,
                    {
                        "msg_id": locked.msg_id,
                        "topic": topic,
                        "message_group": message_group,
                        "delivery_attempt": locked.delivery_attempt,
                    },
                )
            },
            scope={
                "consumer_group": name,
                "topic": topic,
                "message_group": message_group,
                "msg_id": locked.msg_id,
                "commit_log_offset": locked.commit_log_offset,
            },
        )


def _blocked_head(group: ConsumerGroup, topic: str, message_group: str) -> BlockedMessageGroup:
    head = blocked_message_group_get(
        consumer_group=group.name,
        max_delivery_attempts=group.max_delivery_attempts,
        topic=topic,
        message_group=message_group,
    )
    if head is None:
        raise _not_blocked(group.name, topic, message_group)
    return head

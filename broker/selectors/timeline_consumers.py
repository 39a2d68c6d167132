"""The consumer side of a transaction's timeline: each consumer group's hand-outs of the
delivered message, from the delivery journal and, for what a group holds now or for groups
without journal rows, from offsets, in-flight deliveries and dead-letter copies."""

from __future__ import annotations

from typing import Any

from broker.constants import CHECK_GROUP, DLQ_GROUP_TOPIC_PREFIX, PROPERTY_DELIVERY_ATTEMPT
from broker.models import ConsumerOffset, Delivery, DeliveryEvent, Message
from broker.selectors.timeline_entry import TimelineEntry

_JOURNAL_TITLES = {
    DeliveryEvent.Kind.DELIVERED: ("consumer_received", "Received by {group}, attempt {attempt}"),
    DeliveryEvent.Kind.ACKED: ("consumer_acked", "Acked by {group} (attempt {attempt})"),
    DeliveryEvent.Kind.DEAD_LETTERED: (
        "consumer_dead_lettered",
        "Dead-lettered to %DLQ%{group} after {attempt} attempts",
    ),
    DeliveryEvent.Kind.REDELIVERY: (
        "consumer_redelivery",
        "Made visible again to {group} by an operator (offset reset or resend)",
    ),
}


def _journal_entries(
    delivered: Message, dead: dict[str, Message]
) -> tuple[list[TimelineEntry], set[str]]:
    """The delivery journal of the delivered message (``DeliveryEvent``, in insertion order):
    each hand-out to a consumer group (``consumer_received``, with its attempt), ack
    (``consumer_acked``) and dead letter (``consumer_dead_lettered``, with the commit log
    offset of its copy in ``dead``, by group), timed. Returns the entries and the groups they
    name."""
    out = []
    groups = set()
    for event in DeliveryEvent.objects.filter(commit_log_offset=delivered.pk).order_by("id"):
        kind, title = _JOURNAL_TITLES[event.kind]
        group = event.consumer_group
        groups.add(group)
        detail: dict[str, Any] = {"delivery_attempt": event.delivery_attempt}
        if event.kind == DeliveryEvent.Kind.DEAD_LETTERED and group in dead:
            detail["commit_log_offset"] = dead[group].commit_log_offset
        text = title.format(group=group, attempt=event.delivery_attempt)
        out.append(TimelineEntry(event.timestamp, kind, text, group, detail))
    return out, groups


def consumer_entries(delivered: Message, messages: list[Message]) -> list[TimelineEntry]:
    """Each consumer group's hand-outs of the delivered message.

    From the delivery journal (``_journal_entries``): when each group received it (each
    attempt), acked it or had it dead-lettered. Then, untimed, what the group holds now: in
    flight (attempt, invisible until) or, for a group whose offset has not reached it, waiting.
    For a group with no journal rows (deliveries before the journal existed, or rows pruned
    past ``HALFMOON_FILE_RESERVED_HOURS``) it is said from the offsets and the DLQ copy as
    before: dead-lettered (timed by the copy), or acked (untimed: not journalled)."""
    dead = {
        m.topic.removeprefix(DLQ_GROUP_TOPIC_PREFIX): m
        for m in messages
        if m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
    }
    out, journalled = _journal_entries(delivered, dead)
    offsets = ConsumerOffset.objects.filter(
        topic=delivered.topic, queue_id=delivered.queue_id
    ).exclude(consumer_group=CHECK_GROUP)
    in_flight = {d.consumer_group: d for d in Delivery.objects.filter(message_id=delivered.pk)}
    for offset in offsets.order_by("consumer_group"):
        group = offset.consumer_group
        if group in in_flight:
            d = in_flight[group]
            detail = {
                "delivery_attempt": d.delivery_attempt,
                "invisible_until_timestamp": d.invisible_until_timestamp,
            }
            out.append(
                TimelineEntry(
                    None,
                    "consumer_in_flight",
                    f"Received by {group}, attempt {d.delivery_attempt}, not acked yet",
                    group,
                    detail,
                )
            )
        elif group in journalled:
            continue  # acked or dead-lettered: the journal said when
        elif group in dead:
            m = dead[group]
            attempts = m.properties.get(PROPERTY_DELIVERY_ATTEMPT, "?")
            out.append(
                TimelineEntry(
                    m.store_timestamp,
                    "consumer_dead_lettered",
                    f"Dead-lettered to {m.topic} after {attempts} attempts",
                    group,
                    {"delivery_attempt": attempts, "commit_log_offset": m.commit_log_offset},
                )
            )
        elif offset.offset > delivered.queue_offset:
            out.append(
                TimelineEntry(
                    None,
                    "consumer_acked",
                    f"Acked by {group}",
                    group,
                    {"note": "the ack time is not journalled"},
                )
            )
        else:
            out.append(
                TimelineEntry(
                    None,
                    "consumer_waiting",
                    f"Not yet received by {group}",
                    group,
                    {"group_offset": offset.offset},
                )
            )
    return out

"""A transaction's timeline from the broker's own journals (shared by the console's transaction
page and ``GET /api/v1/transactions/{id}/timeline``), and the transaction page's detail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.conf import conf
from broker.constants import (
    CHECK_GROUP,
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    HALF_TOPIC,
    PROPERTY_DELIVERY_ATTEMPT,
)
from broker.models import (
    AuditTarget,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    Message,
    ProducerGroup,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.rules.states import ResolvedBy
from broker.selectors.transactions import transaction_get


@dataclass(frozen=True)
class TimelineEntry:
    """One fact of a transaction's history.

    ``timestamp``: when (ms since the epoch), None when the broker does not journal the time
    (a consumer's ack deletes its delivery; these come last); ``kind``: what (see
    ``transaction_timeline``); ``title``: one line for people; ``actor``: who caused it
    (producer group, ``scan``, ``http`` / ``poll`` / ``telemetry`` check channel,
    ``operator:<name>``, a consumer group) or ""; ``detail``: the journal's own fields;
    ``channel``: for a check (``check_sent``, ``check_undelivered``), how it travelled, by its
    operator-facing name (``check_channel_name``), else "".
    """

    timestamp: int | None
    kind: str
    title: str
    actor: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    channel: str = ""


CHECK_CHANNEL_NAMES = {"http": "webhook", "poll": "long poll", "telemetry": "telemetry (gRPC)"}
"""A check journal row's ``actor`` (its channel) by the name operators know it: a POST to the
group's check URL, a hand-out to a producer long-polling its check requests, a
``RecoverOrphanedTransactionCommand`` written on a RocketMQ client's telemetry stream."""


def check_channel_name(actor: str) -> str:
    """The operator-facing name of the channel a check journal row's ``actor`` names
    (``CHECK_CHANNEL_NAMES``; an unknown one as it is)."""
    return CHECK_CHANNEL_NAMES.get(actor, actor)


def _ms(value: Any) -> str:
    return f"{value} ms" if value is not None else "?"


def _event_entry(event: TransactionEvent, check_max: int) -> TimelineEntry:
    """A check, discard, resume or operator journal row as a timeline entry."""
    kind, d = event.kind, dict(event.detail or {})
    d.setdefault("check_times", event.check_times)
    channel = ""
    if kind == TransactionEvent.Kind.CHECK_SENT:
        channel = check_channel_name(event.actor)
        answer = event.outcome or "no answer yet (handed to a poller)"
        title = f"Check {event.check_times} of {check_max} sent over {channel}"
        if d.get("client_id"):
            title += f" to client {d['client_id']}"
        title += f": {answer}"
        if d.get("latency_ms") is not None:
            title += f" in {_ms(d['latency_ms'])}"
        d["answer"] = event.outcome
    elif kind == TransactionEvent.Kind.CHECK_UNDELIVERED:
        channel = check_channel_name(event.actor)
        error = d.get("error") or "no error text"
        title = (
            f"Check not delivered over {channel} ({error}); retry in {_ms(d.get('retry_in_ms'))}"
        )
    elif kind == TransactionEvent.Kind.DISCARDED:
        title = f"Discarded by the scan: {event.outcome} after {event.check_times} checks"
        d["reason"] = event.outcome
    elif kind == TransactionEvent.Kind.RESUMED:
        title = f"Checks resumed by {event.actor} (was discarded: {d.get('discard_reason') or '?'})"
    elif kind == TransactionEvent.Kind.RESOLVED:
        title = f"{event.outcome} by {event.actor}: {d.get('reason', '')}"
    elif kind == TransactionEvent.Kind.END_REFUSED:
        verb = "Commit" if event.outcome == Resolution.Action.COMMIT else "Rollback"
        sender = "the producer" if event.actor == ResolvedBy.PRODUCER else "a check answer"
        title = f"{verb} from {sender} refused: already {d.get('state') or '?'}"
        if d.get("resolved_by"):
            title += f" (by {d['resolved_by']})"
        d["action"] = event.outcome
    elif kind == "check_requested":
        title = f"Check requested by {event.actor}"
        if d.get("reason"):
            title += f": {d['reason']}"
    else:
        title = f"{kind} {event.outcome}".strip()
    return TimelineEntry(event.timestamp, kind, title, event.actor, d, channel)


def _resolution_entry(
    tx: Transaction, resolution: Resolution, operator_event: TransactionEvent | None
) -> TimelineEntry:
    """The end: commit or rollback, and who sent it (producer, check answer or operator)."""
    verb = "Committed" if resolution.action == Resolution.Action.COMMIT else "Rolled back"
    detail: dict[str, Any] = {
        "action": resolution.action,
        "resolved_by": resolution.resolved_by,
        "reason": resolution.reason,
        "half_queue_offset": resolution.half_queue_offset,
        "op_commit_log_offset": resolution.op_commit_log_offset,
    }
    if resolution.resolved_by == ResolvedBy.OPERATOR and operator_event is not None:
        actor = operator_event.actor
        detail.update(operator_event.detail or {})
        title = f"{verb} by operator {actor.removeprefix('operator:')}: {resolution.reason}"
    elif resolution.resolved_by == ResolvedBy.CHECK:
        actor = "check answer"
        title = f"{verb} by a check answer of producer group {tx.producer_group}"
        if resolution.reason:  # over gRPC: "gRPC client <x-mq-client-id>", who answered
            title += f": {resolution.reason}"
    else:
        actor = f"producer group {tx.producer_group}"
        title = f"{verb} by the producer (end transaction)"
        if resolution.reason:
            title += f": {resolution.reason}"
    return TimelineEntry(resolution.resolved_timestamp, "resolved", title, actor, detail)


def _message_entries(
    tx: Transaction, messages: list[Message]
) -> tuple[list[TimelineEntry], Message | None]:
    """Half messages (the first and each resume's re-append), discard copies, the delivered
    message and dead-letter copies; returns the entries and the delivered message."""
    out: list[TimelineEntry] = []
    delivered = None
    halves = 0
    for m in messages:
        where = {
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
            "commit_log_offset": m.commit_log_offset,
        }
        if m.topic == HALF_TOPIC:
            halves += 1
            first = halves == 1
            title = "Half message stored" if first else "Half message re-appended (resume)"
            kind = "half_stored" if first else "half_reappended"
            actor = f"producer group {m.producer_group}" if first else ""
            out.append(TimelineEntry(m.store_timestamp, kind, title, actor, where))
        elif m.topic == CHECK_MAX_TIME_TOPIC:
            out.append(
                TimelineEntry(
                    m.store_timestamp,
                    "discard_copy",
                    f"Copied to {CHECK_MAX_TIME_TOPIC}",
                    "scan",
                    where,
                )
            )
        elif m.prepared_transaction_offset is not None and m.topic == tx.topic:
            delivered = m
            title = f"Delivered to {m.topic} queue {m.queue_id} at offset {m.queue_offset}"
            out.append(
                TimelineEntry(
                    m.store_timestamp,
                    "delivered",
                    title,
                    "",
                    {**where, "prepared_transaction_offset": m.prepared_transaction_offset},
                )
            )
    return out, delivered


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


def _consumer_entries(delivered: Message, messages: list[Message]) -> list[TimelineEntry]:
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


# Within one millisecond, facts follow in the order they cause each other.
_KIND_RANK = {
    "half_stored": 0,
    "discarded": 2,
    "discard_copy": 3,
    "resumed": 4,
    "half_reappended": 5,
    "resolved": 6,
    "delivered": 7,
    "end_refused": 8,
    "consumer_received": 8,
    "consumer_acked": 9,
    "consumer_dead_lettered": 9,
}


def _sorted(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """By time, then cause before effect within one millisecond (stable: journal order),
    untimed entries last."""
    timed = sorted(
        (e for e in entries if e.timestamp is not None),
        key=lambda e: (e.timestamp or 0, _KIND_RANK.get(e.kind, 1)),
    )
    return timed + [e for e in entries if e.timestamp is None]


def transaction_timeline(transaction_id: str) -> list[TimelineEntry]:
    """A transaction's history from the broker's own journals, oldest first.

    Kinds: ``half_stored`` (the half message; again for each resume's re-append),
    ``check_sent`` (check number, answer, channel, ``latency_ms`` when journalled, the
    client written to for a telemetry check), ``check_undelivered`` (both with ``channel``),
    ``check_requested`` (an operator's "check now"), ``discarded`` and ``discard_copy`` (on
    TRANS_CHECK_MAX_TIME_TOPIC), ``resumed``, ``resolved`` (the end: commit or rollback, by the
    producer, a check answer or an operator with name and reason; an end sent over gRPC has the
    reason ``gRPC client <client id>``, the client that sent it),
    ``end_refused`` (a producer's or check answer's end refused because the transaction had
    already ended), ``delivered`` (the message on its real topic), then per consumer group from
    the delivery journal ``consumer_received`` (each attempt), ``consumer_acked`` and
    ``consumer_dead_lettered`` (timed), and what it holds now, ``consumer_in_flight`` and
    ``consumer_waiting`` (untimed, last; a group with no journal rows shows
    ``consumer_acked`` untimed), ``audit`` (an operator action that changed nothing: refused,
    failed or pending).

    Sources: the half, discard, delivered and dead-letter copies in the commit log (``Message``
    by msg_id), the check and operator journal (``TransactionEvent``), the resolution journal
    (``Resolution``), the operators' audit log (``AuditTarget``: actions that changed
    nothing, kind ``audit``), the delivery journal (``DeliveryEvent`` by the delivered
    message's commit log offset), consumer offsets and in-flight deliveries. Nine queries at
    most.

    Raises:
        NotFound: ``transaction_not_found``.
    """
    tx = transaction_get(transaction_id)
    check_max = conf.transaction_check_max
    messages = list(
        Message.objects.filter(msg_id=tx.transaction_id).defer("body").order_by("commit_log_offset")
    )
    events = list(
        TransactionEvent.objects.filter(transaction_id=tx.transaction_id).order_by(
            "timestamp", "id"
        )
    )
    entries, delivered = _message_entries(tx, messages)
    operator_event = None
    for event in events:
        if event.kind == TransactionEvent.Kind.RESOLVED:
            operator_event = event  # shown with the resolution it explains
            continue
        entries.append(_event_entry(event, check_max))
    resolution = Resolution.objects.filter(transaction_id=tx.transaction_id).first()
    if resolution is not None:
        entries.append(_resolution_entry(tx, resolution, operator_event))
    elif operator_event is not None:
        entries.append(_event_entry(operator_event, check_max))
    entries.extend(_audit_entries(tx.transaction_id))
    if delivered is not None:
        entries.extend(_consumer_entries(delivered, messages))
    return _sorted(entries)


def _audit_entries(transaction_id: str) -> list[TimelineEntry]:
    """Operator actions on the transaction that did not change it (refused, failed, or a bulk
    not yet applied): the audit log's targets. Actions that did change it are already in the
    timeline through the ``TransactionEvent`` they wrote."""
    targets = (
        AuditTarget.objects.filter(transaction_id=transaction_id)
        .exclude(result=AuditTarget.Result.DONE)
        .select_related("entry")
    )
    out = []
    for target in targets:
        entry = target.entry
        title = f"Operator action {entry.action} by {entry.actor}: {target.result}"
        detail = {
            "audit_entry_id": entry.pk,
            "action": entry.action,
            "via": entry.via,
            "reason": entry.reason,
            "result": target.result,
            **(target.detail or {}),
        }
        out.append(TimelineEntry(entry.timestamp, "audit", title, entry.actor, detail))
    return out


@dataclass
class TransactionDetail:
    """What the transaction page shows: the transaction, its current half message (body and
    properties), its producer group (None if deleted), the check max and the timeline."""

    tx: Transaction
    half: Message | None
    group: ProducerGroup | None
    check_max: int
    timeline: list[TimelineEntry]


def transaction_detail(transaction_id: str) -> TransactionDetail:
    """The transaction page's data (``transaction_timeline`` plus two reads).

    Raises:
        NotFound: ``transaction_not_found``.
    """
    timeline = transaction_timeline(transaction_id)
    tx = transaction_get(transaction_id)
    return TransactionDetail(
        tx=tx,
        half=Message.objects.filter(pk=tx.half_commit_log_offset).first(),
        group=ProducerGroup.objects.filter(name=tx.producer_group).first(),
        check_max=conf.transaction_check_max,
        timeline=timeline,
    )

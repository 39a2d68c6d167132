"""A transaction's timeline from the broker's own journals (shared by the console's transaction
page and ``GET /api/v1/transactions/{id}/timeline``), and the transaction page's detail. The
entry type is ``timeline_entry``'s; the consumer groups' entries are ``timeline_consumers``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.conf import conf
from broker.constants import CHECK_MAX_TIME_TOPIC, HALF_TOPIC
from broker.models import (
    AuditTarget,
    Message,
    ProducerGroup,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.rules.states import ResolvedBy
from broker.selectors.timeline_consumers import consumer_entries
from broker.selectors.timeline_entry import TimelineEntry, check_channel_name
from broker.selectors.transactions import transaction_get


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
        entries.extend(consumer_entries(delivered, messages))
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

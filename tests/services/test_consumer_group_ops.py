"""Consumer-group operations (broker.services.consumption): an offset reset to a time
(previewed, frozen, applied against concurrent receives and acks), skipping the backlog, a
resend to one group, and the dead-letter queue's resends (one, or a frozen set)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from django.db import connection

import broker.services.operations.frozen_sets as frozen_sets
from broker.errors import Conflict, Forbidden, InvalidInput
from broker.models import AuditEntry, ConsumerOffset, Delivery, DeliveryEvent, Message
from broker.rules.clock import now_ms
from broker.services.commitlog.messages import message_send
from broker.services.consumption.dead_letters import (
    dead_letter_resend,
    dead_letters_apply,
    dead_letters_preview,
    dead_letters_run,
)
from broker.services.consumption.offset_resets import (
    backlog_skip_preview,
    offset_reset_apply,
    offset_reset_preview,
)
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.consumption.redelivery import message_resend
from broker.services.topology.writes import consumer_group_create, topic_create

OLGA = "console:olga"
INVISIBLE = 60_000
BASE = 1_700_000_000_000


def _send(topic: str, n: int, prefix: str = "m") -> list[Message]:
    return [message_send(topic=topic, body=f"{prefix}{i}".encode()) for i in range(n)]


def _stamp(messages: list[Message], start: int) -> None:
    """Store the messages one second apart from ``start`` (ms), in send order."""
    for i, m in enumerate(messages):
        Message.objects.filter(pk=m.pk).update(store_timestamp=start + i * 1000)


def _receive(group: str, topic: str, n: int = 16, invisible: int = INVISIBLE) -> list:
    return messages_receive(
        consumer_group=group, topic=topic, max_messages=n, invisible_duration_ms=invisible
    )


def _consume_all(group: str, topic: str) -> list:
    out = []
    while batch := _receive(group, topic):
        out.extend(batch)
        messages_ack(consumer_group=group, receipt_handles=[r.receipt_handle for r in batch])
    return out


def _delivered(group: str) -> Counter[int]:
    """Hand-outs to ``group`` per message (commit log offset), from the delivery journal."""
    return Counter(
        DeliveryEvent.objects.filter(
            consumer_group=group, kind=DeliveryEvent.Kind.DELIVERED
        ).values_list("commit_log_offset", flat=True)
    )


def _offsets(group: str) -> dict[int, int]:
    return dict(
        ConsumerOffset.objects.filter(consumer_group=group).values_list("queue_id", "offset")
    )


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="Billing")
    consumer_group_create(name="Audit")
    return "Orders"


@pytest.fixture
def published(monkeypatch) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(frozen_sets, "bulk_action_progress_publish", events.append)
    return events


def test_a_reset_to_a_time_previews_per_queue_and_delivers_exactly_those_again(orders):
    sent = _send(orders, 10)
    _stamp(sent, BASE)
    assert len(_consume_all("Billing", orders)) == 10
    at = BASE + 6 * 1000  # messages 6..9 were stored at or after it

    entry = offset_reset_preview(consumer_group="Billing", timestamp=at, actor=OLGA, via="console")

    assert entry.state == AuditEntry.State.PREVIEWED and entry.reason == ""
    assert entry.scope["redeliver"] == 4 and entry.scope["skip"] == 0
    by_queue = {q["queue_id"]: q for q in entry.scope["queues"]}
    for queue_id, q in by_queue.items():
        later = [m for m in sent[6:] if m.queue_id == queue_id]
        assert q["current"] == sum(1 for m in sent if m.queue_id == queue_id)
        assert q["redeliver"] == len(later)
        if later:
            assert q["new"] == min(m.queue_offset for m in later) and q["direction"] == "back"
    offsets_before = _offsets("Billing")

    with pytest.raises(InvalidInput) as no_reason:
        offset_reset_apply(reset_id=entry.pk, reason=" ", actor=OLGA)
    assert no_reason.value.code == "reason_required"
    entry = offset_reset_apply(reset_id=entry.pk, reason="replay after the 02:00 bug", actor=OLGA)

    assert entry.state == AuditEntry.State.DONE and entry.counts == {"redelivered": 4, "skipped": 0}
    assert entry.reason == "replay after the 02:00 bug"
    assert _offsets("Billing") == offsets_before  # a reset back does not move the offsets
    again = _consume_all("Billing", orders)
    assert sorted(r.message.pk for r in again) == sorted(m.pk for m in sent[6:])
    assert {r.delivery_attempt for r in again} == {1}
    assert (
        DeliveryEvent.objects.filter(
            consumer_group="Billing", kind=DeliveryEvent.Kind.REDELIVERY
        ).count()
        == 4
    )
    assert _delivered("Audit") == Counter()  # another group is untouched
    with pytest.raises(Conflict) as twice:
        offset_reset_apply(reset_id=entry.pk, reason="again", actor=OLGA)
    assert twice.value.code == "offset_reset_applied"


def test_a_reset_supersedes_an_in_flight_handle(orders):
    [m] = _send(orders, 1)
    _stamp([m], BASE)
    [r] = _receive("Billing", orders)
    entry = offset_reset_preview(consumer_group="Billing", timestamp=BASE, actor=OLGA, via="api")
    offset_reset_apply(reset_id=entry.pk, reason="redo", actor=OLGA)

    acked, failed = messages_ack(consumer_group="Billing", receipt_handles=[r.receipt_handle])
    assert acked == 0 and failed[0]["code"] == "invalid_receipt_handle"
    [again] = _receive("Billing", orders)
    assert again.message.pk == m.pk and again.delivery_attempt == 1


@pytest.mark.django_db(transaction=True)
def test_a_reset_racing_receives_and_acks_loses_nothing_and_redelivers_only_the_preview():
    topic_create(name="Race", queue_nums=3)
    consumer_group_create(name="Racers")
    old = _send("Race", 60, "old")
    _stamp(old, BASE)
    first = []
    while batch := _receive("Racers", "Race", 32):
        first.extend(batch)
    in_flight = first[:15]  # acked during the race, some after the reset superseded them
    messages_ack(consumer_group="Racers", receipt_handles=[r.receipt_handle for r in first[15:]])
    entry = offset_reset_preview(
        consumer_group="Racers", timestamp=BASE + 40 * 1000, actor=OLGA, via="console"
    )
    previewed = {m.pk for m in old[40:]}
    assert entry.scope["redeliver"] == len(previewed) == 20
    new = _send("Race", 30, "new")  # after the preview: delivered once, by the offsets

    start = threading.Barrier(4)
    applied = threading.Event()
    errors: list[BaseException] = []

    def consumer(in_flight_mine: list) -> None:
        """Ack half its in-flight messages, receive and ack (one at a time, as a
        SimpleConsumer) until the reset is applied and nothing is left, and ack the other
        half of its in-flight messages once the reset is applied (their handles, if the reset
        superseded them, fail: the message is delivered again instead)."""
        early, late = in_flight_mine[::2], in_flight_mine[1::2]
        try:
            start.wait()
            for r in early:
                messages_ack(consumer_group="Racers", receipt_handles=[r.receipt_handle])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = applied.is_set()
                if done and late:
                    for r in late:
                        messages_ack(consumer_group="Racers", receipt_handles=[r.receipt_handle])
                    late = []
                batch = _receive("Racers", "Race", 4)
                for r in batch:
                    messages_ack(consumer_group="Racers", receipt_handles=[r.receipt_handle])
                if not batch and done:
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    def resetter() -> None:
        """Apply the reset once the consumers have taken some of the messages sent after the
        preview (a deadline of 30 s), while they go on receiving."""
        try:
            start.wait()
            deadline = time.monotonic() + 30
            while (
                DeliveryEvent.objects.filter(
                    consumer_group="Racers", msg_id__in=[m.msg_id for m in new]
                ).count()
                < 8
                and time.monotonic() < deadline
            ):
                pass
            offset_reset_apply(reset_id=entry.pk, reason="race", actor=OLGA)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            applied.set()
            connection.close()

    threads = [threading.Thread(target=consumer, args=(in_flight[i::3],)) for i in range(3)] + [
        threading.Thread(target=resetter)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    assert not Delivery.objects.filter(consumer_group="Racers").exists()  # nothing left over
    delivered = _delivered("Racers")
    for m in old + new:
        expected = 2 if m.pk in previewed else 1
        assert delivered[m.pk] == expected, (m.msg_id, delivered[m.pk], expected)
    assert AuditEntry.objects.get(pk=entry.pk).counts == {"redelivered": 20, "skipped": 0}


def test_skip_moves_offsets_to_the_queue_ends_and_never_backward(orders):
    sent = _send(orders, 8)
    _receive("Billing", orders, 2)  # the group holds offsets, with a backlog of 6
    entry = backlog_skip_preview(consumer_group="Billing", actor=OLGA, via="console")
    assert entry.scope["skip"] == 6 and entry.scope["redeliver"] == 0
    ends = {q["queue_id"]: q["new"] for q in entry.scope["queues"]}
    assert ends == {q: sum(1 for m in sent if m.queue_id == q) for q in range(2)}

    more = _send(orders, 4)
    _consume_all("Billing", orders)  # the group has gone past the previewed ends
    past = _offsets("Billing")
    entry = offset_reset_apply(reset_id=entry.pk, reason="drop the backlog", actor=OLGA)
    assert _offsets("Billing") == past  # never moved back to the previewed ends
    assert entry.counts["skipped"] == 0

    # A skip applied while the group is behind moves it forward, to the previewed ends only.
    _send(orders, 3)
    entry = backlog_skip_preview(consumer_group="Billing", actor=OLGA, via="api")
    _send(orders, 2)  # after the preview: not skipped
    entry = offset_reset_apply(reset_id=entry.pk, reason="skip", actor=OLGA)
    assert entry.counts["skipped"] == 3
    assert len(_consume_all("Billing", orders)) == 2
    assert len(more) == 4


def test_a_reset_to_a_later_time_skips_forward(orders):
    topic_create(name="Single", queue_nums=1)
    sent = _send("Single", 6)
    _stamp(sent, BASE)
    with pytest.raises(InvalidInput) as empty:
        offset_reset_preview(consumer_group="Billing", timestamp=BASE, actor=OLGA, via="api")
    assert empty.value.code == "no_offsets"  # nothing received yet
    [first] = _receive("Billing", "Single", 1)
    assert first.message.pk == sent[0].pk
    entry = offset_reset_preview(
        consumer_group="Billing", timestamp=BASE + 4000, actor=OLGA, via="api", topic="Single"
    )
    [q] = entry.scope["queues"]
    assert (q["current"], q["new"], q["direction"]) == (1, 4, "forward")
    assert entry.scope["skip"] == 3 and entry.scope["redeliver"] == 0
    offset_reset_apply(reset_id=entry.pk, reason="skip to 4", actor=OLGA)
    rest = _consume_all("Billing", "Single")
    assert [r.message.pk for r in rest] == [m.pk for m in sent[4:]]


def test_a_scoped_operator_is_refused_another_group(orders):
    _send(orders, 2)
    _consume_all("Billing", orders)
    _consume_all("Audit", orders)
    mine = frozenset({"Billing"})
    offset_reset_preview(
        consumer_group="Billing", timestamp=0, actor=OLGA, via="api", allowed_consumer_groups=mine
    )
    for call in (
        lambda: offset_reset_preview(
            consumer_group="Audit", timestamp=0, actor=OLGA, via="api", allowed_consumer_groups=mine
        ),
        lambda: backlog_skip_preview(
            consumer_group="Audit", actor=OLGA, via="api", allowed_consumer_groups=mine
        ),
        lambda: message_resend(
            consumer_group="Audit",
            commit_log_offset=Message.objects.first().pk,
            reason="r",
            actor=OLGA,
            via="api",
            allowed_consumer_groups=mine,
        ),
        lambda: dead_letters_preview(
            consumer_group="Audit", actor=OLGA, via="api", allowed_consumer_groups=mine
        ),
    ):
        with pytest.raises(Forbidden) as refused:
            call()
        assert refused.value.code == "consumer_group_outside_scope"
    theirs = offset_reset_preview(
        consumer_group="Audit", timestamp=0, actor="console:root", via="api"
    )
    with pytest.raises(Forbidden):
        offset_reset_apply(reset_id=theirs.pk, reason="r", actor=OLGA, allowed_consumer_groups=mine)
    assert AuditEntry.objects.get(pk=theirs.pk).state == AuditEntry.State.PREVIEWED


def test_resend_one_message_to_one_group_only(orders):
    [m] = _send(orders, 1)
    _consume_all("Billing", orders)
    _consume_all("Audit", orders)
    entry = message_resend(
        consumer_group="Billing", commit_log_offset=m.pk, reason="lost", actor=OLGA, via="api"
    )
    assert entry.action == AuditEntry.Action.RESEND_MESSAGE and entry.state == "done"
    assert [r.message.pk for r in _consume_all("Billing", orders)] == [m.pk]
    assert _consume_all("Audit", orders) == []
    with pytest.raises(InvalidInput):
        message_resend(
            consumer_group="Billing", commit_log_offset=m.pk, reason="", actor=OLGA, via="api"
        )


def _dead_letter(group: str, topic: str, n: int, prefix: str) -> list[Message]:
    """Send ``n`` messages and let ``group`` (max 1 attempt) dead-letter them."""
    sent = _send(topic, n, prefix)
    got = []
    while batch := _receive(group, topic):
        got.extend(batch)
    Delivery.objects.filter(consumer_group=group).update(invisible_until_timestamp=now_ms() - 1)
    assert _receive(group, topic) == []  # each moved to %DLQ%{group}
    return sent


@pytest.fixture
def flaky(orders):
    consumer_group_create(name="Flaky", max_delivery_attempts=1)
    return "Flaky"


def test_a_dead_letter_set_is_frozen_and_newer_dead_letters_are_left_alone(
    orders, flaky, published, django_capture_on_commit_callbacks
):
    first = _dead_letter(flaky, orders, 3, "a")
    entry = dead_letters_preview(consumer_group=flaky, actor=OLGA, via="console")
    assert entry.total == 3 and entry.state == AuditEntry.State.PREVIEWED
    dlq = Message.objects.filter(topic="%DLQ%Flaky").order_by("commit_log_offset")
    frozen = list(entry.targets.order_by("id").values_list("transaction_id", "commit_log_offset"))
    assert frozen == [("", o) for o in dlq.values_list("commit_log_offset", flat=True)]
    later = _dead_letter(flaky, orders, 2, "b")  # after the preview
    assert Message.objects.filter(topic="%DLQ%Flaky").count() == 5

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        entry = dead_letters_apply(resend_id=entry.pk, reason="consumer fixed", actor=OLGA)
    assert len(callbacks) == 1 and entry.state == AuditEntry.State.QUEUED
    entry = dead_letters_run(entry.pk)

    assert entry.state == AuditEntry.State.DONE and entry.counts["done"] == 3
    assert published[-1]["state"] == "done" and published[-1]["processed"] == 3
    again = _receive(flaky, orders)
    assert sorted(r.message.pk for r in again) == sorted(m.pk for m in first)
    assert not {r.message.pk for r in again} & {m.pk for m in later}
    # Running the set again resends nothing twice.
    dead_letters_run(entry.pk)
    assert Delivery.objects.filter(consumer_group=flaky).count() == 3
    with pytest.raises(Conflict):
        dead_letters_apply(resend_id=entry.pk, reason="again", actor=OLGA)


def test_resend_one_dead_letter_delivers_the_original(orders, flaky):
    [m] = _dead_letter(flaky, orders, 1, "x")
    dead = Message.objects.get(topic="%DLQ%Flaky")
    entry = dead_letter_resend(
        consumer_group=flaky, commit_log_offset=dead.pk, reason="retry", actor=OLGA, via="api"
    )
    target = entry.targets.get()
    assert (target.commit_log_offset, target.transaction_id) == (dead.pk, "")
    assert target.detail["original_commit_log_offset"] == m.pk
    [r] = _receive(flaky, orders)
    assert r.message.pk == m.pk and r.delivery_attempt == 1

"""The reconciliation over archives the broker itself wrote: transactions of every kind sent,
ended, back-checked, discarded, resumed and consumed through the API, the scans, Op flushes and
archive exports run as beat runs them (``tasks.*``), then the real job on ``local[2]``.

Over the clean archive it finds nothing. Then every anomaly kind is planted by altering rows
after the fact, the logs are archived again, and ``manage.py reconcile`` finds each kind
exactly once, on the transaction it was planted on, and nothing else.
"""

from __future__ import annotations

import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.db.models import Max

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    TIMER_TOPIC,
)
from broker.models import (
    ArchiveSegment,
    ArchiveWatermark,
    DeliveryEvent,
    Message,
    ReconciliationRun,
    Resolution,
    ScheduledMessage,
    Transaction,
    TransactionEvent,
)
from broker.rules.anomalies import BUCKET_MS, AnomalyKind
from broker.rules.clock import now_ms
from broker.rules.op_body import op_body_format, op_body_parse
from broker.services.commitlog.storage import message_copy, message_put
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.topology.writes import (
    consumer_group_create,
    producer_group_create,
    topic_create,
)
from tasks.checks import check_half_queue
from tasks.op_messages import op_flush_all_task
from tasks.pipeline import archive_export, reconcile
from tests.api_helpers import ack, end, key_client, post, receive, send_half, send_message

TOPIC = "Orders"
SETTLE_MS = 2_300  # settle_ms of the settings below
SEGMENT_MS = 1_000  # HALFMOON_ARCHIVE_SEGMENT_MS below


@pytest.fixture
def broker(transactional_db, broker_settings, settings, tmp_path):
    """Short check settings (timeout 0, 100 ms interval, 2 checks), one-second archive
    segments closed at once, and a topic, a polling producer group G and consumer groups
    C1 and C2. Committed rows (transactional_db), as in production: the export's and the
    reconciliation's lease keepers renew their leases from another connection."""
    broker_settings.update(
        {
            "HALFMOON_TRANSACTION_TIMEOUT_MS": 0,
            "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": 100,
            "HALFMOON_TRANSACTION_CHECK_MAX": 2,
            "HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS": 100,
            "HALFMOON_OP_BATCH_INTERVAL_MS": 10,
            "HALFMOON_ARCHIVE_SEGMENT_MS": 1000,
            "HALFMOON_ARCHIVE_LAG_MS": 0,
        }
    )
    settings.HALFMOON_ARCHIVE_URI = str(tmp_path / "clean")
    topic_create(name=TOPIC, queue_nums=2)
    producer_group_create(name="G", check_url=None)
    for group in ("C1", "C2"):
        consumer_group_create(name=group, max_delivery_attempts=3)
    return settings


def _scan_until_settled(producer, answers: dict[str, str]) -> None:
    """Run the back-check scans and Op flushes as beat does until no transaction is PREPARED;
    the producer polls its check requests and answers those in ``answers`` (transaction id ->
    commit | rollback) through ``end``, the others not at all (UNKNOW)."""
    for _ in range(100):
        for queue_id in range(4):
            check_half_queue(queue_id)
        for request in producer.get("/api/v1/producer-groups/G/check-requests").json()[
            "check_requests"
        ]:
            action = answers.get(request["transaction_id"])
            if action:
                response = end(
                    producer, request["transaction_id"], action, from_transaction_check=True
                )
                assert response.status_code == 200, response.content
        op_flush_all_task()
        if not Transaction.objects.filter(state="PREPARED").exists():
            return
        time.sleep(0.12)
    raise AssertionError("transactions still PREPARED after 100 scans")


def _due_now(*msg_ids: str) -> int:
    """Make the delay messages ``msg_ids`` due now: their schedules, the messages as stored
    on the timer topic and their recalls' delete markers (TIMER_DELIVER_MS). Returns now."""
    now = now_ms()
    ScheduledMessage.objects.filter(msg_id__in=msg_ids).update(delivery_timestamp=now)
    keys = {f"{TOPIC}+{msg_id}" for msg_id in msg_ids}
    for message in Message.objects.filter(topic=TIMER_TOPIC):
        props = message.properties
        if (
            props.get(PROPERTY_UNIQ_KEY) in msg_ids
            or message.msg_id in msg_ids
            or (props.get(PROPERTY_TIMER_DEL_UNIQKEY) in keys)
        ):
            props[PROPERTY_TIMER_DELIVER_MS] = str(now)
            message.save(update_fields=["properties"])
    return now


def _consume_all(consumer) -> None:
    for group in ("C1", "C2"):
        while True:
            messages = receive(consumer, group, TOPIC, max_messages=32).json()["messages"]
            if not messages:
                break
            assert ack(consumer, [m["receipt_handle"] for m in messages], group).status_code == 200


@pytest.fixture
def traffic(broker):
    """Transactions of every kind through the API: committed and rolled back by the producer,
    by a check answer, discarded after the check max, and one discarded, resumed and committed
    by an operator; everything delivered is received and acked by C1 and C2."""
    producer = key_client("producer", producer_groups=["G"])
    consumer = key_client("consumer", consumer_groups=["C1", "C2"])
    owner = key_client("owner", is_admin=True)
    kinds: dict[str, list[str]] = {
        k: [] for k in ("commit", "rollback", "check_commit", "check_rollback", "discard")
    }
    # Delay messages: one the timer moves (below), one recalled before its time. Sent for a
    # minute ahead (a loaded machine answers a send slower than a short delay), then made due
    # now, as if sent for now.
    for msg_id in ("delay-on-time", "delay-recalled"):
        sent = send_message(producer, topic=TOPIC, msg_id=msg_id, deliver_at=now_ms() + 60_000)
        assert sent.status_code == 201 and sent.json()["state"] == "SCHEDULED", sent.content
    recalled = post(owner, "/api/v1/scheduled-messages/delay-recalled/recall", {"reason": "x"})
    assert recalled.status_code == 200, recalled.content
    due = _due_now("delay-on-time", "delay-recalled")
    plan = [("commit", 9), ("rollback", 3), ("check_commit", 2), ("check_rollback", 2)]
    plan.append(("discard", 4))
    for kind, count in plan:
        for _ in range(count):
            response = send_half(producer, "G", TOPIC)
            assert response.status_code == 201, response.content
            tx_id = response.json()["transaction_id"]
            kinds[kind].append(tx_id)
            if kind in ("commit", "rollback"):
                assert end(producer, tx_id, kind).status_code == 200
    answers = {t: "commit" for t in kinds["check_commit"]}
    answers |= {t: "rollback" for t in kinds["check_rollback"]}
    _scan_until_settled(producer, answers)
    assert Transaction.objects.filter(state="DISCARDED").count() == 4

    resumed = kinds["discard"].pop()
    url = f"/api/v1/transactions/{resumed}"
    assert post(owner, f"{url}/resume-check", {"reason": "producer fixed"}).status_code == 200
    response = post(owner, f"{url}/resolve", {"action": "commit", "reason": "paid"})
    assert response.status_code == 200, response.content
    op_flush_all_task()
    assert scheduled_messages_deliver(now=max(now_ms(), due)) == 1  # only the one not recalled
    _consume_all(consumer)
    return {"producer": producer, "kinds": kinds, "resumed": resumed}


def _archive_all() -> None:
    """Wait until every row is in a closed segment and every half message is older than the
    default window's end, then run the beat's archive export.

    The window ends settle_ms before as_of, and as_of is the end of the last closed segment:
    up to a segment before now. So the newest half message must be settle_ms plus a segment
    old (and a margin) when the export runs, or a fast run of the traffic leaves the newest
    transactions outside the window (seen: 6 of 20 judged). Waited from the newest message of
    any kind, or from now if later."""
    newest = max(
        Message.objects.aggregate(at=Max("store_timestamp"))["at"] or 0,
        int(time.time() * 1000),
    )
    time.sleep(max(0.0, (newest + SETTLE_MS + SEGMENT_MS + 200) / 1000 - time.time()))
    assert archive_export() >= 1
    assert not ArchiveSegment.objects.filter(end_timestamp__gt=time.time() * 1000).exists()


def _delivered(tx_id: str) -> Message:
    return Message.objects.get(msg_id=tx_id, topic=TOPIC)


def _plant(traffic) -> dict[str, str]:
    """Alter rows so that each anomaly kind holds for one transaction (or msg id); return kind
    -> the transaction id (or msg id) it was planted on."""
    committed = traffic["kinds"]["commit"]
    discarded = traffic["kinds"]["discard"]
    planted: dict[str, str] = {}

    # hanging: a discard that never happened (2 checks sent, no discard, no copy).
    tx_id = discarded[0]
    TransactionEvent.objects.filter(transaction_id=tx_id, kind="discarded").delete()
    Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx_id).delete()
    planted[AnomalyKind.HANGING] = tx_id

    # late_end: the producer commits after the discard (a real 409, journalled).
    tx_id = discarded[1]
    assert end(traffic["producer"], tx_id, "commit").status_code == 409
    planted[AnomalyKind.LATE_END] = tx_id

    # lost_commit: the delivered message is gone.
    tx_id = committed[0]
    _delivered(tx_id).delete()
    planted[AnomalyKind.LOST_COMMIT] = tx_id

    # rolled_back_but_delivered: the journal says rollback, the topic has the message.
    tx_id = committed[1]
    Resolution.objects.filter(transaction_id=tx_id).update(action="ROLLBACK")
    planted[AnomalyKind.ROLLED_BACK_BUT_DELIVERED] = tx_id

    # slow_visibility: the end was recorded 5 s before the message became visible.
    tx_id = committed[2]
    Resolution.objects.filter(transaction_id=tx_id).update(
        resolved_timestamp=_delivered(tx_id).store_timestamp - 5_000
    )
    planted[AnomalyKind.SLOW_VISIBILITY] = tx_id

    with transaction.atomic():
        # double_resolution: a second Op message names the same half offset.
        tx = Transaction.objects.get(pk=committed[3])
        message_put(
            topic=OP_HALF_TOPIC,
            queue_id=tx.half_queue_id,
            msg_id="op-again",
            body=op_body_format([tx.half_queue_offset]),
            tags="d",
            system_queue_nums=4,
        )
        planted[AnomalyKind.DOUBLE_RESOLUTION] = tx.pk

        # duplicate_delivery: the commit is delivered a second time on its topic.
        delivered = _delivered(committed[4])
        message_copy(delivered, topic=TOPIC, queue_id=delivered.queue_id, sys_flag=8)
        planted[AnomalyKind.DUPLICATE_DELIVERY] = committed[4]

        # orphan_delivery: a transactional message on the topic that no half message explains.
        orphan = message_put(topic=TOPIC, queue_id=0, msg_id="orphan-1", body=b"?", sys_flag=8)
        # Stored at the time of the traffic, inside the judged window (until = as_of - settle).
        Message.objects.filter(pk=orphan.pk).update(store_timestamp=delivered.store_timestamp)
        planted[AnomalyKind.ORPHAN_DELIVERY] = "orphan-1"

    # undelivered_to_group: C2 consumed past this message but its deliveries are gone.
    candidates = [_delivered(t) for t in committed[5:]]
    # The producer spreads messages over the topic's queues at random: judge each queue that
    # holds a candidate (seven candidates, so one queue holds at least two).
    last: dict[int, int] = {}
    for m in candidates:
        last[m.queue_id] = max(last.get(m.queue_id, -1), m.queue_offset)
    victim = next(m for m in candidates if m.queue_offset < last[m.queue_id])
    DeliveryEvent.objects.filter(
        consumer_group="C2", commit_log_offset=victim.commit_log_offset
    ).delete()
    planted[AnomalyKind.UNDELIVERED_TO_GROUP] = victim.msg_id

    # bucket_mismatch: a rollback whose resolution and Op entry are gone, 30 minutes back (a
    # settled bucket), with no check: no other anomaly names it.
    tx = Transaction.objects.get(pk=traffic["kinds"]["rollback"][0])
    Resolution.objects.filter(transaction=tx).delete()
    for op in Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=tx.half_queue_id):
        offsets = op_body_parse(op.body).offsets
        if tx.half_queue_offset in offsets:
            rest = [o for o in offsets if o != tx.half_queue_offset]
            if rest:
                op.body = op_body_format(rest)
                op.save(update_fields=["body"])
            else:
                op.delete()
    Message.objects.filter(topic=HALF_TOPIC, msg_id=tx.pk).update(
        store_timestamp=tx.born_timestamp - 30 * 60_000,
        born_timestamp=tx.born_timestamp - 30 * 60_000,
    )
    planted[AnomalyKind.BUCKET_MISMATCH] = tx.pk

    # scheduled_undelivered: a delay message the timer never moves, due now (before the
    # window's end: _archive_all waits settle_ms past the newest row).
    lost = send_message(
        traffic["producer"], topic=TOPIC, msg_id="delay-lost", deliver_at=now_ms() + 60_000
    )
    assert lost.status_code == 201, lost.content
    _due_now("delay-lost")
    planted[AnomalyKind.SCHEDULED_UNDELIVERED] = "delay-lost"
    return planted


def test_a_clean_archive_finds_nothing_and_each_planted_anomaly_is_found_once(
    traffic, broker, spark, tmp_path
):
    _archive_all()
    run = ReconciliationRun.objects.get(pk=reconcile())
    assert run.state == "succeeded", run.error
    assert run.anomaly_counts == {} and run.anomalies.count() == 0
    assert run.transactions == 20
    assert run.states == {"PREPARED": 0, "COMMITTED": 12, "ROLLED_BACK": 5, "DISCARDED": 3}

    planted = _plant(traffic)
    assert set(planted) == set(AnomalyKind.values)
    ArchiveWatermark.objects.all().delete()
    ArchiveSegment.objects.all().delete()
    broker.HALFMOON_ARCHIVE_URI = str(tmp_path / "planted")
    _archive_all()
    half = Message.objects.filter(topic=HALF_TOPIC).order_by("store_timestamp").first()
    since = half.store_timestamp - half.store_timestamp % BUCKET_MS
    out = StringIO()
    call_command("reconcile", "--since", str(since), "--no-progress", stdout=out)

    run = ReconciliationRun.objects.order_by("-id").first()
    assert run.state == "succeeded", run.error
    assert run.anomaly_counts == {kind: 1 for kind in AnomalyKind.values}, out.getvalue()
    found = {a.kind: a for a in run.anomalies.all()}
    for kind, name in planted.items():
        anomaly = found[kind]
        if kind == AnomalyKind.BUCKET_MISMATCH:
            assert anomaly.evidence["unexplained_transaction_ids"] == [name]
            assert anomaly.producer_group == "G"
        elif kind == AnomalyKind.ORPHAN_DELIVERY:
            assert (anomaly.msg_id, anomaly.transaction_id) == (name, "")
        elif kind == AnomalyKind.SCHEDULED_UNDELIVERED:
            assert (anomaly.msg_id, anomaly.transaction_id, anomaly.topic) == (name, "", TOPIC)
        else:
            assert anomaly.transaction_id == name, (kind, anomaly)

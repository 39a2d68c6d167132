"""The prune behind the archive (broker.services.archive.prune): only archived, final rows older
than HALFMOON_FILE_RESERVED_HOURS go, and what the broker derives from the database still holds
afterwards: the rebuild finds no difference, the scan and its checkpoints work, the /metrics
counters do not go backwards, the console shows every transaction left."""

from __future__ import annotations

import pytest
from django.test import Client

from broker.conf import conf
from broker.constants import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from broker.errors import TransactionAlreadyResolved
from broker.models import (
    ArchiveWatermark,
    CheckRequest,
    Delivery,
    DeliveryEvent,
    Message,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.pipeline.archive_io import table_read
from broker.rules.clock import now_ms
from broker.rules.op_body import op_body_parse
from broker.services.archive import prune as prune_module
from broker.services.archive.export import archive_export_due
from broker.services.archive.prune import archive_prune
from broker.services.archive.segments import closed_until
from broker.services.checks import checkpoint_advance, half_queue_scan
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_receive
from broker.services.metrics import metrics_fold
from broker.services.recovery import transactions_rebuild
from broker.services.topology.writes import consumer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from tests.console.conftest import signed_in
from tests.pipeline.archive_support import (
    HOUR_MS,
    MINUTE_MS,
    broker_round,
    broker_setup,
    logs_age,
)
from tests.services.test_metrics import scrape

MODELS = (Message, Transaction, Resolution, TransactionEvent, CheckRequest, DeliveryEvent)


def _counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in MODELS}


def _checkpoints() -> list[tuple[int, int]]:
    return [checkpoint_advance(half_queue_id=q) for q in range(conf.half_queue_nums)]


def _counters() -> dict:
    """The /metrics counters (not the gauge of what is pending now)."""
    return {k: v for k, v in scrape().items() if k[0] != "rocketmq_half_messages"}


def _old_history():
    """A round three hours old, with a message of topic Held still in flight to consumer group
    H and a late (refused) end of its committed transaction journalled now; then a round of
    now."""
    old = broker_round("old")
    topic_create(name="Held", queue_nums=1)
    consumer_group_create(name="H")
    message_send(topic="Held", body=b"held", keys="held")
    messages_receive(consumer_group="H", topic="Held", max_messages=1, invisible_duration_ms=60_000)
    logs_age(3 * HOUR_MS)
    with pytest.raises(TransactionAlreadyResolved):
        transaction_end(transaction_id=old.committed, producer_group="G", action="rollback")
    new = broker_round("new")
    return old, new


@pytest.fixture
def one_hour_reserved(broker_settings):
    broker_settings["HALFMOON_FILE_RESERVED_HOURS"] = 1
    return broker_settings


@pytest.mark.django_db
def test_prune_keeps_what_is_not_archived_final_and_old(
    spark, settings, tmp_path, one_hour_reserved
):
    settings.HALFMOON_ARCHIVE_URI = uri = str(tmp_path / "archive")
    broker_setup()
    old, new = _old_history()
    checkpoints = _checkpoints()
    assert not transactions_rebuild(dry_run=True).differences
    counters = _counters()
    before = _counts()
    now = now_ms()

    archive_export_due(now_ms=now)

    bound = min(
        closed_until(now_ms=now, segment_ms=600_000, lag_ms=60_000), now - conf.file_reserved_ms
    )
    assert ArchiveWatermark.objects.get(name="logs").pruned_until_timestamp == bound
    # Gone: the old rolled-back and discarded transactions and everything they are made of.
    for tid in (old.rolled_back, old.discarded):
        assert not Transaction.objects.filter(pk=tid).exists()
        assert not Message.objects.filter(msg_id=tid).exists()  # half, discard copy
        assert not TransactionEvent.objects.filter(transaction_id=tid).exists()
        assert not Resolution.objects.filter(transaction_id=tid).exists()
    assert not Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, store_timestamp__lt=bound)
    assert not Message.objects.filter(topic="%DLQ%D", store_timestamp__lt=bound).exists()
    assert not Message.objects.filter(keys="old-normal").exists()  # acked by every group
    assert not DeliveryEvent.objects.filter(timestamp__lt=bound).exists()
    # Kept: PREPARED whatever its age, a committed one with a late end, an in-flight message.
    assert Transaction.objects.get(pk=old.prepared).state == "PREPARED"
    assert Message.objects.filter(msg_id=old.prepared, topic=HALF_TOPIC).exists()
    kept = Transaction.objects.get(pk=old.committed)
    assert Message.objects.filter(prepared_transaction_offset=kept.half_commit_log_offset).exists()
    assert Resolution.objects.filter(transaction_id=old.committed).exists()
    assert TransactionEvent.objects.filter(transaction_id=old.committed, kind="end_refused")
    held = Message.objects.get(keys="held")
    assert Delivery.objects.filter(message=held, consumer_group="H").exists()
    # Kept: everything of the new round.
    for tid in vars(new).values():
        assert Transaction.objects.filter(pk=tid).exists()
        assert Message.objects.filter(msg_id=tid, topic=HALF_TOPIC).exists()
    assert DeliveryEvent.objects.filter(timestamp__gte=bound).exists()
    # Each Op message left before the bound names a half message left, or the scan has not
    # passed it.
    halves = set(Message.objects.filter(topic=HALF_TOPIC).values_list("queue_id", "queue_offset"))
    for op in Message.objects.filter(topic=OP_HALF_TOPIC, store_timestamp__lt=bound):
        named = {(op.queue_id, o) for o in op_body_parse(bytes(op.body)).offsets}
        assert named & halves or op.queue_offset >= checkpoints[op.queue_id][1]

    # What was pruned is in the archive.
    after = _counts()
    assert after["broker.Message"] < before["broker.Message"]
    archived = {
        r[0] for r in table_read(spark, uri=uri, table="commit_log").select("msg_id").collect()
    }
    assert {old.rolled_back, old.discarded} <= archived
    events = table_read(spark, uri=uri, table="transaction_events")
    assert events.where(events.transaction_id == old.discarded).count() == 3

    # The invariants.
    assert not transactions_rebuild(dry_run=True).differences
    assert _counters() == counters
    assert all(
        later >= earlier
        for new_ckpt, old_ckpt in zip(_checkpoints(), checkpoints, strict=True)
        for later, earlier in zip(new_ckpt, old_ckpt, strict=True)
    )
    for q in range(conf.half_queue_nums):
        assert half_queue_scan(half_queue_id=q) is not None
    viewer = Client()
    signed_in(viewer, "viewer")
    for tid in Transaction.objects.values_list("pk", flat=True):
        assert viewer.get(f"/console/transactions/{tid}/").status_code == 200
    assert viewer.get(f"/console/transactions/{old.rolled_back}/").status_code == 404


@pytest.mark.django_db
def test_prune_waits_for_the_archive_and_the_metrics_fold(one_hour_reserved, monkeypatch):
    broker_setup()
    old = broker_round("old")
    logs_age(3 * HOUR_MS)
    now = now_ms()
    _checkpoints()
    monkeypatch.setattr(prune_module, "TRANSACTION_BATCH", 1)  # every keyset step taken
    monkeypatch.setattr(prune_module, "MESSAGE_BATCH", 2)
    monkeypatch.setattr(prune_module, "metrics_fold", lambda: None)  # a fold that cannot run
    # Not archived yet: nothing goes.
    ArchiveWatermark.objects.create(name="logs", archived_until_timestamp=now - 4 * HOUR_MS)
    before = _counts()
    assert archive_prune(now_ms=now) == {}
    assert _counts() == before
    # Archived, but the journals not folded into /metrics: the transactions stay, the
    # messages and delivery journal that depend on nothing go.
    ArchiveWatermark.objects.update(archived_until_timestamp=now - 30 * MINUTE_MS)
    pruned = archive_prune(now_ms=now)
    assert Transaction.objects.count() == before["broker.Transaction"]
    assert pruned["broker.DeliveryEvent"] == before["broker.DeliveryEvent"]
    assert "broker.Transaction" not in pruned
    counters = _counters()
    # Folded: they go, and the counters stay.
    metrics_fold()
    pruned = archive_prune(now_ms=now)
    assert pruned["broker.Transaction"] == 3  # committed, rolled back, discarded
    assert list(Transaction.objects.values_list("pk", flat=True)) == [old.prepared]
    assert not Message.objects.exclude(msg_id=old.prepared).filter(topic=HALF_TOPIC).exists()
    assert not Message.objects.filter(topic=OP_HALF_TOPIC).exists()  # below the checkpoints
    assert _counters() == counters
    assert not transactions_rebuild(dry_run=True).differences

"""Batched Op messages (RIP-50): full Op messages at once, the rest after the batch interval."""

from __future__ import annotations

from broker.constants import OP_HALF_TOPIC
from broker.models import Message, Resolution
from broker.rules.op_body import op_body_parse
from broker.services.transactions.end import transaction_end
from broker.services.transactions.op_messages import op_flush, op_flush_all
from tests.support import prepare


def _resolve(count: int) -> list[str]:
    ids = []
    for i in range(count):
        tx = prepare(body=f"m{i}")
        transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
        ids.append(tx.pk)
    return ids


def test_a_partial_batch_waits_for_the_interval_then_one_op_message_names_it(
    topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    _resolve(5)

    assert op_flush(half_queue_id=0) == 0  # younger than HALFMOON_OP_BATCH_INTERVAL_MS
    assert Resolution.objects.filter(op_commit_log_offset__isnull=True).count() == 5

    Resolution.objects.update(resolved_timestamp=0)  # the oldest is now an interval old
    assert op_flush_all() == 1
    [op] = Message.objects.filter(topic=OP_HALF_TOPIC)
    assert sorted(op_body_parse(op.body).offsets) == sorted(
        Resolution.objects.values_list("half_queue_offset", flat=True)
    )
    assert op.tags == "d"
    assert set(Resolution.objects.values_list("op_commit_log_offset", flat=True)) == {
        op.commit_log_offset
    }


def test_full_op_messages_are_written_at_once_and_the_remainder_waits(
    topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_OP_MSG_MAX_SIZE"] = 16  # "0,1,2,3,4,5,6,7," is 16 bytes
    _resolve(10)

    assert op_flush(half_queue_id=0) == 1  # one full message; offsets 8 and 9 wait
    [op] = Message.objects.filter(topic=OP_HALF_TOPIC)
    assert bytes(op.body) == b"0,1,2,3,4,5,6,7,"
    waiting = Resolution.objects.filter(op_commit_log_offset__isnull=True)
    assert sorted(waiting.values_list("half_queue_offset", flat=True)) == [8, 9]

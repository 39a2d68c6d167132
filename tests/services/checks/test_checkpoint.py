"""The scan checkpoints of ``CID_RMQ_SYS_TRANS`` (broker/services/checks/checkpoint.py:
updateConsumeOffset of the half queue, calculateOpOffset of the Op queue)."""

from __future__ import annotations

from django.db import transaction

from broker.constants import (
    CHECK_GROUP,
    HALF_TOPIC,
    OP_HALF_TOPIC,
)
from broker.models import (
    ConsumeQueue,
    ConsumerOffset,
    Message,
    Transaction,
)
from broker.services import checks
from broker.services.transactions.end import transaction_end
from broker.services.transactions.op_messages import op_flush
from broker.services.transactions.operator import transaction_operator_resolve
from broker.services.transactions.resolution import transaction_discard
from tests.services.checks.helpers import (
    checkpoints,
    prepare_many,
)


def _advance() -> tuple[int, int]:
    result = checks.checkpoint_advance(half_queue_id=0)
    assert result == checkpoints()
    return result


def _end(tx: Transaction, action: str = "commit") -> None:
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action=action)


def _op_bodies() -> list[str]:
    return [
        bytes(body).decode()
        for body in Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=0)
        .order_by("queue_offset")
        .values_list("body", flat=True)
    ]


def test_checkpoints_move_over_the_done_prefix_only(one_queue, producer_group):
    txs = prepare_many("G", 6)
    assert [tx.half_queue_offset for tx in txs] == list(range(6))
    assert _advance() == (0, 0)

    # Resolved but not yet in the Op log: not done.
    _end(txs[0])
    assert _advance() == (0, 0)
    assert op_flush(half_queue_id=0, force=True) == 1
    assert _advance() == (1, 1)

    # Offsets 2 and 3 are done, 1 is still PREPARED: the half checkpoint waits at 1, and the Op
    # message naming 2 and 3 is not passed either.
    _end(txs[2], "rollback")
    _end(txs[3])
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies() == ["0,", "2,3,"]
    assert _advance() == (1, 1)

    # 1 resolved, unflushed: still waiting; flushed: both move over everything done.
    _end(txs[1])
    assert _advance() == (1, 1)
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies() == ["0,", "2,3,", "1,"]
    assert _advance() == (4, 3)

    # A discarded transaction is done (no Op message names it).
    with transaction.atomic():
        transaction_discard(
            Transaction.objects.select_for_update().get(pk=txs[4].pk), reason="check_max"
        )
    assert _advance() == (5, 3)

    # An operator commits the discarded one later: its resolution names offset 4, behind the
    # half checkpoint, which does not move back; its Op message is passed once written.
    transaction_operator_resolve(
        transaction_id=txs[4].transaction_id, action="commit", reason="test", actor="operator:t"
    )
    assert _advance() == (5, 3)
    op_flush(half_queue_id=0, force=True)
    assert _op_bodies()[-1] == "4,"
    assert _advance() == (5, 4)

    # The last one: the half checkpoint reaches the end of the half queue.
    _end(txs[5], "rollback")
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (6, 5)
    half_max = ConsumeQueue.objects.get(topic=HALF_TOPIC, queue_id=0).max_offset
    assert half_max == 6


def test_the_op_checkpoint_stops_at_an_op_message_naming_an_offset_not_yet_passed(
    one_queue, producer_group
):
    txs = prepare_many("G", 5)
    _end(txs[1])
    _end(txs[3])
    op_flush(half_queue_id=0, force=True)  # Op 0 names 1 and 3
    _end(txs[0])
    op_flush(half_queue_id=0, force=True)  # Op 1 names 0
    assert _op_bodies() == ["1,3,", "0,"]

    # Half checkpoint 2 (offset 2 PREPARED): Op 0 names 3, so neither Op message is passed
    # although Op 1's offset lies below the checkpoint.
    assert _advance() == (2, 0)
    _end(txs[2])
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (4, 3)


def test_checkpoints_never_move_backwards(one_queue, producer_group):
    txs = prepare_many("G", 3)
    _advance()
    ConsumerOffset.objects.filter(consumer_group=CHECK_GROUP, topic=HALF_TOPIC, queue_id=0).update(
        offset=2
    )
    ConsumerOffset.objects.filter(
        consumer_group=CHECK_GROUP, topic=OP_HALF_TOPIC, queue_id=0
    ).update(offset=7)
    assert _advance() == (2, 7)  # offset 0 is PREPARED, and there is no Op message at all
    for tx in txs:
        _end(tx)
    op_flush(half_queue_id=0, force=True)
    assert _advance() == (3, 7)


def test_the_op_checkpoint_passes_more_than_one_read_batch(one_queue, producer_group):
    count = checks.OP_READ_BATCH * 2 + 5
    txs = prepare_many("G", count)
    for tx in txs:
        _end(tx)
        op_flush(half_queue_id=0, force=True)  # one Op message each
    assert len(_op_bodies()) == count
    assert _advance() == (count, count)

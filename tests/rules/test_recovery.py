"""The rebuild's derivation and comparison with no database: what one transaction's half
message, Op log entry, delivery, discard copy and journals say its row and journal must be
(``broker.rules.recovery``, ``compare``, ``oplog.OpIndex``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker.rules.recovery import (
    CheckJournal,
    Delivery,
    DiscardCopy,
    HalfMessage,
    JournalledResolution,
    TransactionLogs,
    check_journal_fold,
    immunity_seconds,
    is_resolved,
    journal_conflict,
    journalled_op_offset,
    next_check_timestamp,
    real_queue_id,
    resolution_action,
    resolver,
    transaction_derive,
    transaction_state,
)
from broker.rules.recovery_report import (
    DELIVERED_MESSAGE,
    MISSING,
    RESOLUTION,
    RESOLUTION_ACTION,
    RESOLUTION_HALF_OFFSET,
    RESOLUTION_OP_OFFSET,
    Difference,
)
from broker.services.recovery.compare import REBUILT_REASON, transaction_compare
from broker.services.recovery.oplog import OpIndex, op_offsets
from broker.services.recovery.repair import RepairPlan

pytestmark = pytest.mark.unit

TIMEOUT = 6000  # transactionTimeOut (ms)
INTERVAL = 30_000  # transactionCheckInterval (ms)
BORN = 1_000_000
HALF_CLO = 500  # the half message's commit log offset
OFFSET = 7  # its half queue offset
OP_CLO = 900  # an Op message naming it


def _half(**changes: Any) -> HalfMessage:
    half = HalfMessage(
        commit_log_offset=HALF_CLO,
        queue_offset=OFFSET,
        msg_id="T1",
        tags="TagA",
        keys="K1",
        born_timestamp=BORN,
        store_timestamp=BORN + 1,
        real_topic="TranTest",
        real_queue_id="2",
        producer_group="G",
        immunity_seconds=None,
    )
    return half._replace(**changes)


def _resolution(**changes: Any) -> JournalledResolution:
    resolution = JournalledResolution(
        id=1,
        transaction_id="T1",
        half_queue_id=0,
        half_queue_offset=OFFSET,
        action="ROLLBACK",
        resolved_by="check",
        resolved_timestamp=BORN + 50,
        op_commit_log_offset=None,
    )
    return resolution._replace(**changes)


def _logs(**changes: Any) -> TransactionLogs:
    logs = TransactionLogs(
        half_queue_id=0,
        half=_half(),
        delivery=None,
        op_named=None,
        discard=None,
        journal=CheckJournal(),
        resolution=None,
    )
    return logs._replace(**changes)


def _derive(logs: TransactionLogs, row: dict | None = None):
    return transaction_derive(logs, row, transaction_timeout_ms=TIMEOUT, check_interval_ms=INTERVAL)


def _compare(logs: TransactionLogs, row: dict | None) -> RepairPlan:
    plan = RepairPlan()
    transaction_compare(logs, row, plan, transaction_timeout_ms=TIMEOUT, check_interval_ms=INTERVAL)
    return plan


def _row_of(logs: TransactionLogs) -> dict[str, Any]:
    """The stored row the services would have left for ``logs``."""
    derived = _derive(logs)
    return {
        "transaction_id": logs.half.msg_id,
        **derived.columns,
        "next_check_timestamp": derived.next_check_timestamp,
        "resolved_timestamp": derived.resolved_timestamp,
    }


# The state, strongest evidence first.


def test_nothing_but_the_half_message_is_prepared():
    assert transaction_state(_logs()) == "PREPARED"


def test_a_delivery_commits_whatever_else_says():
    delivered = Delivery(queue_offset=3, store_timestamp=BORN + 40)
    assert transaction_state(_logs(delivery=delivered)) == "COMMITTED"
    assert transaction_state(_logs(delivery=delivered, op_named=OP_CLO)) == "COMMITTED"
    rolled_back = _resolution(action="ROLLBACK")
    assert transaction_state(_logs(delivery=delivered, resolution=rolled_back)) == "COMMITTED"


def test_an_op_message_or_a_journal_row_without_a_delivery_is_a_rollback():
    assert transaction_state(_logs(op_named=OP_CLO)) == "ROLLED_BACK"
    assert transaction_state(_logs(resolution=_resolution())) == "ROLLED_BACK"
    # A resolution outranks a discard copy: an operator resolved a DISCARDED transaction.
    discard = DiscardCopy(HALF_CLO + 10, "check_max", BORN + 60)
    assert transaction_state(_logs(op_named=OP_CLO, discard=discard)) == "ROLLED_BACK"


def test_only_a_discard_copy_newer_than_the_current_half_message_discards():
    newer = DiscardCopy(HALF_CLO + 10, "check_max", BORN + 60)
    older = DiscardCopy(HALF_CLO - 10, "check_max", BORN - 60)  # before a resume
    assert transaction_state(_logs(discard=newer)) == "DISCARDED"
    assert transaction_state(_logs(discard=older)) == "PREPARED"


def test_resolved_states_and_their_journal_spelling():
    assert is_resolved("COMMITTED") and is_resolved("ROLLED_BACK")
    assert not is_resolved("PREPARED") and not is_resolved("DISCARDED")
    assert resolution_action("COMMITTED") == "COMMIT"
    assert resolution_action("ROLLED_BACK") == "ROLLBACK"
    with pytest.raises(KeyError):
        resolution_action("DISCARDED")


# Who resolved it, and when.


def test_the_journal_says_who_resolved():
    logs = _logs(op_named=OP_CLO, resolution=_resolution(resolved_by="operator"))
    assert resolver(logs, "ROLLED_BACK", None) == ("operator", BORN + 50)


def test_without_a_journal_row_the_row_is_believed_only_when_it_agrees_on_the_state():
    delivered = _logs(delivery=Delivery(3, BORN + 40))
    agreeing = {"state": "COMMITTED", "resolved_by": "check", "resolved_timestamp": BORN + 30}
    assert resolver(delivered, "COMMITTED", agreeing) == ("check", BORN + 30)
    prepared_row = {"state": "PREPARED", "resolved_by": None, "resolved_timestamp": None}
    assert resolver(delivered, "COMMITTED", prepared_row) == ("producer", BORN + 40)
    assert resolver(_logs(op_named=OP_CLO), "ROLLED_BACK", None) == ("producer", None)


def test_a_resumed_transaction_with_an_older_discard_copy_is_resolved_by_nobody():
    resumed = _logs(discard=DiscardCopy(HALF_CLO - 10, "check_max", BORN - 60))
    assert resolver(resumed, "PREPARED", None) == (None, None)
    derived = _derive(resumed)
    assert (derived.state, derived.resolved_by, derived.resolved_timestamp) == (
        "PREPARED",
        None,
        None,
    )
    assert derived.columns["discard_reason"] == ""


def test_the_derivation_believes_an_agreeing_row_on_who_resolved_when_the_journal_is_missing():
    delivered = _logs(delivery=Delivery(3, BORN + 40), op_named=OP_CLO)
    agreeing = {"state": "COMMITTED", "resolved_by": "operator", "resolved_timestamp": BORN + 30}
    derived = _derive(delivered, agreeing)
    assert (derived.resolved_by, derived.resolved_timestamp) == ("operator", BORN + 30)
    assert (_derive(delivered).resolved_by, _derive(delivered).resolved_timestamp) == (
        "producer",
        BORN + 40,
    )


def test_a_discard_is_resolved_by_discard_at_the_copy_time_and_prepared_by_nobody():
    logs = _logs(discard=DiscardCopy(HALF_CLO + 10, "file_reserved_time", BORN + 60))
    assert resolver(logs, "DISCARDED", None) == ("discard", BORN + 60)
    assert resolver(_logs(), "PREPARED", None) == (None, None)


# Check times and the next check.


def test_check_times_count_the_checks_since_the_last_resume_in_insertion_order():
    journal = check_journal_fold(
        [
            ("T1", False, 100),
            ("T2", False, 100),
            ("T1", False, 200),
            ("T1", True, 300),  # resumeCheckHalfMessage: counting starts again
            ("T1", False, 250),  # a test clock: insertion order wins over timestamps
        ]
    )
    assert journal["T1"] == CheckJournal(
        check_times=1, last_check_timestamp=250, resumed_timestamp=300
    )
    assert journal["T2"] == CheckJournal(check_times=1, last_check_timestamp=100)
    assert check_journal_fold([("T3", True, 400)])["T3"].check_times == 0


def test_every_check_after_a_resume_counts():
    journal = check_journal_fold(
        [("T1", False, 100), ("T1", True, 200), ("T1", False, 300), ("T1", False, 400)]
    )
    assert journal["T1"] == CheckJournal(
        check_times=2, last_check_timestamp=400, resumed_timestamp=200
    )


def test_a_prepared_transaction_is_due_at_its_first_check_then_an_interval_after_each():
    first = _logs()
    assert next_check_timestamp(
        first, "PREPARED", transaction_timeout_ms=TIMEOUT, check_interval_ms=INTERVAL
    ) == (BORN + TIMEOUT)
    immune = _logs(half=_half(immunity_seconds="60"))
    assert _derive(immune).next_check_timestamp == BORN + 60_000
    assert _derive(immune).check_immunity_ms == 60_000
    checked = _logs(journal=CheckJournal(2, last_check_timestamp=BORN + 9000))
    assert _derive(checked).next_check_timestamp == BORN + 9000 + INTERVAL
    resumed = _logs(journal=CheckJournal(0, resumed_timestamp=BORN + 99_000))
    assert _derive(resumed).next_check_timestamp == BORN + 99_000  # due at once
    assert _derive(_logs(op_named=OP_CLO)).next_check_timestamp is None


def test_properties_that_are_not_numbers_fall_back():
    assert immunity_seconds(None) is None and immunity_seconds("") is None
    assert immunity_seconds("soon") is None and immunity_seconds("30") == 30
    shorter = _logs(half=_half(immunity_seconds="2"))  # below the timeout: the timeout
    assert _derive(shorter).check_immunity_ms == TIMEOUT
    assert _derive(_logs(half=_half(immunity_seconds="x"))).check_immunity_ms == TIMEOUT
    assert real_queue_id("3") == 3 and real_queue_id(None) == 0 and real_queue_id("q") == 0


# The whole row.


def test_the_derived_columns_of_a_committed_transaction():
    logs = _logs(
        delivery=Delivery(queue_offset=41, store_timestamp=BORN + 40),
        op_named=OP_CLO,
        journal=CheckJournal(3, last_check_timestamp=BORN + 30),
        resolution=_resolution(action="COMMIT", op_commit_log_offset=OP_CLO),
    )
    derived = _derive(logs)
    assert derived.columns == {
        "producer_group": "G",
        "topic": "TranTest",
        "queue_id": 2,
        "tags": "TagA",
        "keys": "K1",
        "half_queue_id": 0,
        "half_queue_offset": OFFSET,
        "half_commit_log_offset": HALF_CLO,
        "born_timestamp": BORN,
        "state": "COMMITTED",
        "check_times": 3,
        "resolved_by": "check",
        "queue_offset": 41,
        "discard_reason": "",
    }
    assert derived.resolved_timestamp == BORN + 50
    assert derived.last_check_timestamp == BORN + 30


def test_a_half_message_without_group_or_topic_properties_derives_empty_ones():
    bare = _logs(half=_half(producer_group=None, real_topic=None, real_queue_id=None))
    columns = _derive(bare).columns
    assert (columns["producer_group"], columns["topic"], columns["queue_id"]) == ("", "", 0)


def test_the_discard_reason_is_kept_only_while_discarded():
    discard = DiscardCopy(HALF_CLO + 10, "check_max", BORN + 60)
    assert _derive(_logs(discard=discard)).columns["discard_reason"] == "check_max"
    resolved = _logs(discard=discard, resolution=_resolution(resolved_by="operator"))
    assert _derive(resolved).columns["discard_reason"] == ""


# What the rebuild leaves to an operator.


def test_a_commit_journalled_with_nothing_delivered_is_not_repaired():
    conflict = journal_conflict(_logs(op_named=OP_CLO, resolution=_resolution(action="COMMIT")))
    assert conflict == Difference(
        "T1", DELIVERED_MESSAGE, None, "COMMIT journalled, none delivered", False
    )
    plan = _compare(_logs(resolution=_resolution(action="COMMIT")), None)
    assert [d.field for d in plan.differences] == [DELIVERED_MESSAGE]
    assert not plan.create and not plan.resolution_create


def test_a_journal_row_for_another_half_offset_is_not_repaired():
    conflict = journal_conflict(_logs(resolution=_resolution(half_queue_offset=OFFSET + 1)))
    assert conflict == Difference("T1", RESOLUTION_HALF_OFFSET, [0, OFFSET + 1], [0, OFFSET], False)
    assert journal_conflict(_logs(resolution=_resolution())) is None
    assert journal_conflict(_logs()) is None


# Which Op message the journal should point at.


def test_the_journal_points_at_an_op_message_that_names_the_offset():
    credited = _logs(op_named=OP_CLO, resolution=_resolution(op_commit_log_offset=OP_CLO))
    assert journalled_op_offset(credited) == OP_CLO
    later = _logs(resolution=_resolution(op_commit_log_offset=OP_CLO + 5), op_verified=True)
    assert journalled_op_offset(later) == OP_CLO + 5  # written after the index was read
    bogus = _logs(op_named=OP_CLO, resolution=_resolution(op_commit_log_offset=HALF_CLO))
    assert journalled_op_offset(bogus) == OP_CLO
    unflushed = _logs(resolution=_resolution(op_commit_log_offset=HALF_CLO))
    assert journalled_op_offset(unflushed) is None  # op_flush names it again
    unknown = _logs(op_named=OP_CLO, resolution=_resolution())
    assert journalled_op_offset(unknown) == OP_CLO


def test_with_no_journal_row_the_first_op_message_is_the_one_to_point_at():
    assert journalled_op_offset(_logs(op_named=OP_CLO)) == OP_CLO
    assert journalled_op_offset(_logs()) is None


# Comparing with the stored row.


def test_a_row_equal_to_the_logs_has_no_difference():
    for logs in (
        _logs(),
        _logs(journal=CheckJournal(1, last_check_timestamp=BORN + 7000)),
        _logs(discard=DiscardCopy(HALF_CLO + 10, "check_max", BORN + 60)),
        _logs(op_named=OP_CLO, resolution=_resolution(op_commit_log_offset=OP_CLO)),
    ):
        plan = _compare(logs, _row_of(logs))
        assert plan.differences == [] and not plan.update and not plan.resolution_update


def test_a_missing_row_and_journal_row_are_planned():
    logs = _logs(delivery=Delivery(41, BORN + 40), op_named=OP_CLO)
    plan = _compare(logs, None)
    assert [(d.field, d.derived) for d in plan.differences] == [
        (MISSING, "COMMITTED"),
        (RESOLUTION, "COMMIT"),
    ]
    [row] = plan.create
    assert row["state"] == "COMMITTED" and row["next_check_timestamp"] is None
    assert row["check_immunity_ms"] == TIMEOUT and row["resolved_by"] == "producer"
    [journalled] = plan.resolution_create
    assert journalled["op_commit_log_offset"] == OP_CLO
    assert journalled["reason"] == REBUILT_REASON
    assert plan.op_timestamps_wanted == set()  # the delivery's time is known


def test_a_rolled_back_transaction_without_any_time_takes_its_op_message_time():
    plan = _compare(_logs(op_named=OP_CLO), None)
    assert plan.op_timestamps_wanted == {OP_CLO}


def test_a_prepared_row_the_op_log_resolves_is_repaired_with_its_scheduling():
    logs = _logs(op_named=OP_CLO, resolution=_resolution(op_commit_log_offset=OP_CLO))
    row = _row_of(_logs())  # PREPARED, a next check scheduled
    plan = _compare(logs, row)
    assert {(d.field, d.stored, d.derived) for d in plan.differences} == {
        ("state", "PREPARED", "ROLLED_BACK"),
        ("resolved_by", None, "check"),
        ("next_check_timestamp", BORN + TIMEOUT, None),
    }
    assert plan.update["T1"] == {
        "state": "ROLLED_BACK",
        "resolved_by": "check",
        "next_check_timestamp": None,
        "last_check_timestamp": None,
        "resolved_timestamp": BORN + 50,
    }


def test_a_wrong_journal_action_and_op_offset_are_planned():
    logs = _logs(
        delivery=Delivery(41, BORN + 40),
        op_named=OP_CLO,
        resolution=_resolution(action="ROLLBACK", op_commit_log_offset=None),
    )
    plan = _compare(logs, _row_of(logs))
    assert [(d.field, d.stored, d.derived) for d in plan.differences] == [
        (RESOLUTION_ACTION, "ROLLBACK", "COMMIT"),
        (RESOLUTION_OP_OFFSET, None, OP_CLO),
    ]
    assert plan.resolution_update == {1: {"action": "COMMIT", "op_commit_log_offset": OP_CLO}}


# The Op log index.


def test_the_op_index_keeps_the_first_op_message_naming_each_offset():
    ops = OpIndex(bound=10)
    ops.message_add(b"3,4,", 100)
    ops.message_add(b"4,5,12,", 200)  # 12 is past the half queue's end when read
    assert (ops.get(3), ops.get(4), ops.get(5), ops.get(6)) == (100, 100, 200, None)
    assert ops.get(12) is None and ops.get(-1) is None
    assert ops.out_of_range == 1 and ops.messages == 2


def test_bad_op_body_parts_are_logged_and_skipped(caplog):
    with caplog.at_level(logging.WARNING, logger="halfmoon.recovery"):
        assert op_offsets(b"1,x,2,") == [1, 2]
    assert "b'x'" in caplog.text

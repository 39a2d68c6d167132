"""Rebuilding the derived transaction state from the commit log (``broker.services.recovery``,
``manage.py rebuild_transactions``): no difference after traffic of every kind, every planted
difference found with the right field and repaired, and the command's output and exit status.

The crash test (``tests/e2e/test_crash.py``) runs the command after killing real workers.
How long a rebuild takes at 100,000 or 1,000,000 transactions: ``bench/rebuild_cost.py``.
The derivation alone, with no database: ``test_derive.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from broker.conf import conf
from broker.constants import HALF_TOPIC, OP_HALF_TOPIC
from broker.models import Message, Resolution, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.rules.op_body import op_body_parse
from broker.rules.states import TransactionState
from broker.services import checks
from broker.services.commitlog.storage import message_put
from broker.services.recovery import (
    COMPARED_FIELDS,
    DELIVERED_MESSAGE,
    EXTRA,
    MISSING,
    RESOLUTION,
    RESOLUTION_ACTION,
    RESOLUTION_OP_OFFSET,
    RebuildReport,
    transactions_rebuild,
)
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.op_messages import op_flush, op_flush_all
from tests.e2e.processes import database_url
from tests.support import CheckServer, closed_port_url, due_at, prepare, round_for


@pytest.fixture(autouse=True)
def _op_journal_flushed_at_once(broker_settings):
    """These tests set up flushed Op journals; RIP-50's batching rule (full messages at once,
    the rest after HALFMOON_OP_BATCH_INTERVAL_MS) has its own tests in test_op_batching.py."""
    broker_settings["HALFMOON_OP_BATCH_INTERVAL_MS"] = 0


ROOT = Path(__file__).resolve().parents[3]
INTERVAL = 30_000  # HALFMOON_TRANSACTION_CHECK_INTERVAL_MS default

try:  # built by the operator work (resolve / resume-check endpoints)
    from broker.services.transactions.operator import (
        transaction_operator_resolve,
        transaction_resume_check,
    )
except ImportError:  # pragma: no cover - until it lands, make the same evidence by hand
    transaction_operator_resolve = None
    transaction_resume_check = None


def _resume(tx: Transaction) -> Transaction:
    """Resume the checks of a DISCARDED transaction (RocketMQ resumeCheckHalfMessage)."""
    if transaction_resume_check is not None:
        return transaction_resume_check(transaction_id=tx.pk, actor="operator:test")
    with transaction.atomic():
        tx = Transaction.objects.select_for_update().get(pk=tx.pk)
        half = Message.objects.get(pk=tx.half_commit_log_offset)
        copy = message_put(
            system_queue_nums=conf.half_queue_nums,
            topic=HALF_TOPIC,
            queue_id=tx.half_queue_id,
            msg_id=tx.pk,
            body=bytes(half.body),
            tags=half.tags,
            keys=half.keys,
            properties=dict(half.properties),
            sys_flag=half.sys_flag,
            producer_group=tx.producer_group,
            born_timestamp=half.born_timestamp,
        )
        now = now_ms()
        Transaction.objects.filter(pk=tx.pk).update(
            half_queue_offset=copy.queue_offset,
            half_commit_log_offset=copy.commit_log_offset,
            state=TransactionState.PREPARED,
            resolved_by=None,
            resolved_timestamp=None,
            discard_reason="",
            check_times=0,
            undelivered_checks=0,
            last_check_timestamp=None,
            next_check_timestamp=now,
        )
        TransactionEvent.objects.create(
            transaction_id=tx.pk, kind=TransactionEvent.Kind.RESUMED, timestamp=now, check_times=0
        )
    return Transaction.objects.get(pk=tx.pk)


def _operator_commit(tx: Transaction) -> None:
    assert transaction_operator_resolve is not None, (
        "broker.services.transactions.operator is needed"
    )
    transaction_operator_resolve(
        transaction_id=tx.pk, action="commit", reason="checked by hand", actor="operator:test"
    )


def _fields(report: RebuildReport) -> set[tuple[str, str]]:
    return {(d.transaction_id, d.field) for d in report.differences}


def _rows() -> dict[str, dict]:
    return {row["transaction_id"]: row for row in Transaction.objects.values()}


@pytest.fixture
def traffic(db, topic, producer_group, broker_settings):
    """Traffic of every kind, on PostgreSQL, in the test's transaction. Returns the named
    transactions (all ids are in the database anyway)."""
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    answers: dict[str, str] = {}
    server = CheckServer(
        answer=lambda c: (200, {"state": answers.get(c["transaction_id"], "UNKNOW")})
    )
    with server:
        producer_group_create(name="H", check_url=server.url)
        producer_group_create(name="Dead", check_url=closed_port_url())
        named: dict[str, Transaction] = {}

        # Producer ends: commits and rollbacks, and an unknown end that changes nothing. Eight
        # resolutions over four half queues: at least one Op message names several offsets.
        for i in range(12):
            tx = prepare(body=f"producer {i}")
            action = ("commit", "rollback", "unknown")[i % 3]
            transaction_end(transaction_id=tx.pk, producer_group="G", action=action)
            named[f"producer_{action}_{i}"] = tx
        # Some of the journal is flushed into Op messages naming many offsets, the rest not.
        op_flush_all()
        for i in range(4):
            tx = prepare(body=f"late {i}")
            transaction_end(
                transaction_id=tx.pk, producer_group="G", action=("commit", "rollback")[i % 2]
            )
            named[f"unflushed_{i}"] = tx

        # Check answers over HTTP: commit, rollback, unknown (twice, then discarded).
        for state in ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW", "UNKNOW", "UNKNOW"):
            tx = prepare(producer_group="H", body=f"checked {state}")
            answers[tx.pk] = state
            named[f"checked_{state}_{len(named)}"] = tx
        checked = [tx for name, tx in named.items() if name.startswith("checked_")]
        now = max(due_at(tx) for tx in checked)
        for _round in range(3):  # two UNKNOW answers, then the third round discards
            for q in sorted({tx.half_queue_id for tx in checked}):
                checks.check_outcomes_apply(
                    checks.checks_send(checks.check_claim(half_queue_id=q, now=now)[0]), now=now
                )
            now += INTERVAL
        discarded = [tx for tx in checked if answers[tx.pk] == "UNKNOW"]
        for tx in discarded:
            tx.refresh_from_db()
            assert tx.state == TransactionState.DISCARDED, tx
            assert tx.check_times == 2
        # One discarded transaction is resumed and checked again (once, unknown), one is
        # committed by an operator, one stays discarded.
        resumed = _resume(discarded[0])
        round_for(resumed, now)
        resumed.refresh_from_db()
        assert resumed.check_times == 1 and resumed.state == TransactionState.PREPARED
        named["resumed"] = resumed
        if transaction_operator_resolve is not None:
            _operator_commit(discarded[1])
            named["operator_committed"] = discarded[1]
        # A resumed transaction then committed by its check.
        answers[resumed.pk] = "COMMIT_MESSAGE"
        round_for(resumed, now + INTERVAL)
        resumed.refresh_from_db()
        assert resumed.state == TransactionState.COMMITTED

        # Polled checks (G has no check_url) and undelivered ones (nothing listens).
        polled = prepare(body="polled")
        checks.check_claim(half_queue_id=polled.half_queue_id, now=due_at(polled))
        handed = checks.check_requests_poll(producer_group="G")
        assert polled.pk in {check["transaction_id"] for check in handed}
        named["polled"] = polled
        dead = prepare(producer_group="Dead", body="dead")
        round_for(dead, due_at(dead))
        named["dead"] = dead
        named["pending"] = prepare(body="pending", check_immunity_seconds=60)
    return named


def test_no_difference_after_traffic_of_every_kind(traffic):
    report = transactions_rebuild(dry_run=True)
    assert report.differences == []
    assert report.transactions == Transaction.objects.count()
    assert report.half_messages == Message.objects.filter(topic=HALF_TOPIC).count()
    assert report.half_messages == report.transactions + 1  # the resumed copy
    assert report.op_messages == Message.objects.filter(topic=OP_HALF_TOPIC).count() > 0
    assert not report.applied
    # Op messages name many offsets, and part of the journal is not flushed yet.
    bodies = Message.objects.filter(topic=OP_HALF_TOPIC).values_list("body", flat=True)
    assert max(len(op_body_parse(b).offsets) for b in bodies) > 1
    assert Resolution.objects.filter(op_commit_log_offset__isnull=True).exists()
    states = set(Transaction.objects.values_list("state", flat=True))
    assert states == set(TransactionState.values)
    assert TransactionEvent.objects.filter(kind="check_undelivered").exists()

    # A repairing run finds nothing either and changes no row.
    before = _rows()
    report = transactions_rebuild()
    assert report.differences == [] and report.applied and report.repaired == 0
    assert _rows() == before

    # Flushing the rest of the journal changes nothing the rebuild sees.
    assert op_flush_all() > 0
    assert transactions_rebuild(dry_run=True).differences == []


def test_small_chunks_give_the_same_answer(traffic):
    Transaction.objects.filter(pk=traffic["pending"].pk).update(check_times=7)
    report = transactions_rebuild(dry_run=True, chunk_size=2)
    assert _fields(report) == {(traffic["pending"].pk, "check_times")}
    assert report.transactions == Transaction.objects.count()


def test_planted_differences_are_found_and_repaired(traffic):
    expected = _rows()
    deleted_prepared = traffic["pending"]
    deleted_resolved = traffic["producer_commit_0"]  # flushed into an Op message
    state_changed = traffic["producer_rollback_1"]
    check_times_changed = traffic["polled"]
    offset_changed = traffic["producer_unknown_2"]
    delivered_but_prepared = traffic["producer_commit_3"]
    op_missing = traffic["unflushed_1"]  # a rollback, not yet flushed
    action_wrong = traffic["unflushed_0"]  # a commit, not yet flushed

    Transaction.objects.filter(pk=deleted_prepared.pk).delete()
    Resolution.objects.filter(transaction_id=deleted_resolved.pk).delete()
    Transaction.objects.filter(pk=deleted_resolved.pk).delete()
    Transaction.objects.filter(pk=state_changed.pk).update(
        state=TransactionState.PREPARED, resolved_by=None, next_check_timestamp=now_ms()
    )
    Transaction.objects.filter(pk=check_times_changed.pk).update(check_times=9)
    Transaction.objects.filter(pk=offset_changed.pk).update(half_queue_offset=999_999)
    Resolution.objects.filter(transaction_id=delivered_but_prepared.pk).delete()
    Transaction.objects.filter(pk=delivered_but_prepared.pk).update(
        state=TransactionState.PREPARED,
        resolved_by=None,
        queue_offset=None,
        next_check_timestamp=now_ms(),
    )
    # The journal says flushed, but the Op message it names is the half message itself.
    bogus_op = Transaction.objects.get(pk=op_missing.pk).half_commit_log_offset
    Resolution.objects.filter(transaction_id=op_missing.pk).update(op_commit_log_offset=bogus_op)
    Resolution.objects.filter(transaction_id=action_wrong.pk).update(action="ROLLBACK")
    ghost = dict(expected[deleted_prepared.pk])
    ghost.update(transaction_id="GHOST", half_queue_offset=888_888, half_commit_log_offset=-1)
    Transaction.objects.create(**ghost)

    report = transactions_rebuild(dry_run=True)
    found = _fields(report)
    by_key = {(d.transaction_id, d.field): d for d in report.differences}
    assert found == {
        (deleted_prepared.pk, MISSING),
        (deleted_resolved.pk, MISSING),
        (deleted_resolved.pk, RESOLUTION),
        (state_changed.pk, "state"),
        (state_changed.pk, "resolved_by"),
        (state_changed.pk, "next_check_timestamp"),
        (check_times_changed.pk, "check_times"),
        (offset_changed.pk, "half_queue_offset"),
        (delivered_but_prepared.pk, "state"),
        (delivered_but_prepared.pk, "resolved_by"),
        (delivered_but_prepared.pk, "queue_offset"),
        (delivered_but_prepared.pk, "next_check_timestamp"),
        (delivered_but_prepared.pk, RESOLUTION),
        (op_missing.pk, RESOLUTION_OP_OFFSET),
        (action_wrong.pk, RESOLUTION_ACTION),
        ("GHOST", EXTRA),
    }, sorted(found)
    assert by_key[(deleted_prepared.pk, MISSING)].derived == "PREPARED"
    assert by_key[(deleted_resolved.pk, MISSING)].derived == "COMMITTED"
    assert by_key[(state_changed.pk, "state")].stored == "PREPARED"
    assert by_key[(state_changed.pk, "state")].derived == "ROLLED_BACK"
    assert (
        by_key[(check_times_changed.pk, "check_times")].stored,
        by_key[(check_times_changed.pk, "check_times")].derived,
    ) == (9, 1)
    assert by_key[(offset_changed.pk, "half_queue_offset")].stored == 999_999
    assert (
        by_key[(offset_changed.pk, "half_queue_offset")].derived == offset_changed.half_queue_offset
    )
    assert by_key[(delivered_but_prepared.pk, "state")].derived == "COMMITTED"
    assert by_key[(op_missing.pk, RESOLUTION_OP_OFFSET)].stored == bogus_op
    assert by_key[(op_missing.pk, RESOLUTION_OP_OFFSET)].derived is None
    assert by_key[(action_wrong.pk, RESOLUTION_ACTION)].derived == "COMMIT"
    assert all(d.repairable for d in report.differences)
    assert not report.applied and report.repaired == 0
    assert Transaction.objects.filter(pk="GHOST").exists()  # a dry run writes nothing

    repair = transactions_rebuild()
    assert _fields(repair) == found
    assert repair.applied and repair.repaired == len(found)
    again = transactions_rebuild(dry_run=True)
    assert again.differences == [], again.differences

    # The rows are what they were before the planting, but for scheduling.
    rebuilt = _rows()
    assert set(rebuilt) == set(expected)
    for tid, row in expected.items():
        for name in COMPARED_FIELDS:
            assert rebuilt[tid][name] == row[name], (tid, name)
    assert rebuilt[deleted_prepared.pk]["next_check_timestamp"] == due_at(deleted_prepared)
    assert rebuilt[deleted_resolved.pk]["next_check_timestamp"] is None
    for tid in (deleted_resolved.pk, delivered_but_prepared.pk):
        resolution = Resolution.objects.get(transaction_id=tid)
        assert resolution.action == "COMMIT"
        assert resolution.op_commit_log_offset is not None  # named by the flushed Op message
    assert Resolution.objects.get(transaction_id=action_wrong.pk).action == "COMMIT"
    # The resolution whose Op message was bogus is unflushed again: the next flush names it.
    assert Resolution.objects.get(transaction_id=op_missing.pk).op_commit_log_offset is None
    op_flush(half_queue_id=op_missing.half_queue_id, force=True)
    flushed = Resolution.objects.get(transaction_id=op_missing.pk).op_commit_log_offset
    assert (
        op_missing.half_queue_offset in op_body_parse(Message.objects.get(pk=flushed).body).offsets
    )
    assert transactions_rebuild(dry_run=True).differences == []


def test_a_deleted_op_message_leaves_its_resolutions_to_be_flushed_again(traffic):
    op = Message.objects.filter(topic=OP_HALF_TOPIC).order_by("commit_log_offset").first()
    named = op_body_parse(op.body).offsets
    Resolution.objects.filter(op_commit_log_offset=op.pk).update(op_commit_log_offset=None)
    Message.objects.filter(pk=op.pk).delete()
    resolutions = Resolution.objects.filter(half_queue_id=op.queue_id, half_queue_offset__in=named)
    Resolution.objects.filter(pk__in=resolutions).update(op_commit_log_offset=op.pk)
    report = transactions_rebuild()
    assert {d.field for d in report.differences} == {RESOLUTION_OP_OFFSET}
    assert len(report.differences) == len(named)
    assert all(r.op_commit_log_offset is None for r in resolutions)
    op_flush(half_queue_id=op.queue_id, force=True)
    assert transactions_rebuild(dry_run=True).differences == []


def test_an_op_message_the_journal_does_not_know_is_credited(traffic):
    resolution = Resolution.objects.filter(op_commit_log_offset__isnull=False).first()
    Resolution.objects.filter(pk=resolution.pk).update(op_commit_log_offset=None)
    report = transactions_rebuild()
    assert [(d.field, d.stored, d.derived) for d in report.differences] == [
        (RESOLUTION_OP_OFFSET, None, resolution.op_commit_log_offset)
    ]
    resolution.refresh_from_db()
    assert resolution.op_commit_log_offset is not None
    # So the flusher does not name the offset a second time.
    op_flush(half_queue_id=resolution.half_queue_id, force=True)
    naming = [
        body
        for body in Message.objects.filter(
            topic=OP_HALF_TOPIC, queue_id=resolution.half_queue_id
        ).values_list("body", flat=True)
        if resolution.half_queue_offset in op_body_parse(body).offsets
    ]
    assert len(naming) == 1
    assert transactions_rebuild(dry_run=True).differences == []


def test_a_commit_journalled_but_never_delivered_is_left_to_an_operator(traffic):
    rolled_back = traffic["producer_rollback_1"]
    Resolution.objects.filter(transaction_id=rolled_back.pk).update(action="COMMIT")
    report = transactions_rebuild()
    assert [(d.transaction_id, d.field, d.repairable) for d in report.differences] == [
        (rolled_back.pk, DELIVERED_MESSAGE, False)
    ]
    assert report.repaired == 0
    assert Transaction.objects.get(pk=rolled_back.pk).state == "ROLLED_BACK"  # untouched
    with pytest.raises(CommandError) as raised:
        call_command("rebuild_transactions", "--dry-run", stdout=_Sink(), stderr=_Sink())
    assert raised.value.returncode == 3


def test_a_row_pointing_at_the_superseded_half_of_a_resumed_transaction_is_moved(traffic):
    resumed = Transaction.objects.get(pk=traffic["resumed"].pk)
    event = TransactionEvent.objects.get(transaction_id=resumed.pk, kind="resumed")
    old_offset = event.detail.get("previous_half_queue_offset")
    if old_offset is None:  # resumed by hand (no operator service): the older copy is first
        old_offset = (
            Message.objects.filter(topic=HALF_TOPIC, msg_id=resumed.pk)
            .order_by("commit_log_offset")
            .first()
            .queue_offset
        )
    old = Message.objects.get(
        topic=HALF_TOPIC, queue_id=resumed.half_queue_id, queue_offset=old_offset
    )
    Transaction.objects.filter(pk=resumed.pk).update(
        half_queue_offset=old.queue_offset, half_commit_log_offset=old.commit_log_offset
    )
    for chunk_size in (2, 2000):
        report = transactions_rebuild(dry_run=True, chunk_size=chunk_size)
        assert {(d.field, d.stored, d.derived) for d in report.differences} == {
            ("half_queue_offset", old.queue_offset, resumed.half_queue_offset),
            ("half_commit_log_offset", old.commit_log_offset, resumed.half_commit_log_offset),
        }
    transactions_rebuild()
    assert transactions_rebuild(dry_run=True).differences == []
    assert Transaction.objects.get(pk=resumed.pk).half_queue_offset == resumed.half_queue_offset


def test_a_journalled_row_without_a_half_message_is_left_to_an_operator(traffic):
    row = dict(_rows()[traffic["producer_rollback_1"].pk])
    row.update(transaction_id="GHOST", half_queue_offset=888_888, half_commit_log_offset=-1)
    Transaction.objects.create(**row)
    Resolution.objects.create(
        transaction_id="GHOST",
        half_queue_id=row["half_queue_id"],
        half_queue_offset=888_888,
        action="ROLLBACK",
        resolved_by="producer",
    )
    report = transactions_rebuild()
    assert [(d.transaction_id, d.field, d.stored, d.repairable) for d in report.differences] == [
        ("GHOST", EXTRA, "ROLLED_BACK", False)
    ]
    assert Transaction.objects.filter(pk="GHOST").exists()


def test_a_discard_copy_makes_a_discarded_transaction(traffic):
    discarded = Transaction.objects.filter(state=TransactionState.DISCARDED).first()
    Transaction.objects.filter(pk=discarded.pk).update(
        state=TransactionState.PREPARED,
        resolved_by=None,
        discard_reason="",
        next_check_timestamp=now_ms(),
    )
    report = transactions_rebuild()
    assert _fields(report) == {
        (discarded.pk, name)
        for name in ("state", "resolved_by", "discard_reason", "next_check_timestamp")
    }
    discarded_again = Transaction.objects.get(pk=discarded.pk)
    assert discarded_again.state == "DISCARDED" and discarded_again.discard_reason == "check_max"
    assert discarded_again.next_check_timestamp is None


class _Sink:
    """A stdout for call_command that keeps what was written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_command_reports_no_difference_and_exits_0(traffic):
    out = _Sink()
    call_command("rebuild_transactions", "--dry-run", stdout=out)
    assert "No difference." in out.text
    assert "dry run" in out.text
    count = Transaction.objects.count()
    assert f"transactions:        {count}" in out.text
    out = _Sink()
    call_command("rebuild_transactions", "--dry-run", "--json", stdout=out)
    data = json.loads(out.text)
    assert data["differences"] == [] and data["transactions"] == count
    assert data["dry_run"] is True and data["applied"] is False


def test_command_lists_each_difference_and_exits_1(traffic):
    tid = traffic["polled"].pk
    Transaction.objects.filter(pk=tid).update(check_times=9)
    out = _Sink()
    with pytest.raises(CommandError) as raised:
        call_command("rebuild_transactions", "--dry-run", stdout=out, stderr=_Sink())
    assert raised.value.returncode == 1
    assert f"{tid}\tcheck_times\t9\t1" in out.text
    assert Transaction.objects.get(pk=tid).check_times == 9

    out = _Sink()
    with pytest.raises(CommandError) as raised:
        call_command("rebuild_transactions", "--json", stdout=out, stderr=_Sink())
    assert raised.value.returncode == 1
    data = json.loads(out.text)
    assert data["differences"] == [
        {
            "transaction_id": tid,
            "field": "check_times",
            "stored": 9,
            "derived": 1,
            "repairable": True,
        }
    ]
    assert data["applied"] is True and data["repaired"] == 1
    assert Transaction.objects.get(pk=tid).check_times == 1
    call_command("rebuild_transactions", "--dry-run", stdout=_Sink())  # exit 0: no raise


@pytest.mark.django_db(transaction=True)
def test_command_exit_status_in_a_subprocess(topic, producer_group):
    """manage.py exits 0 when consistent, 1 when it found (and, without --dry-run, repaired)
    differences: against this test's committed database."""
    tx = prepare(body="sub")
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    op_flush_all()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HALFMOON_", "DJANGO_"))}
    name = connection.settings_dict["NAME"]
    env.update(
        {
            "DATABASE_URL": database_url(name),
            "DJANGO_SETTINGS_MODULE": "halfmoon.settings",
        }
    )

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "rebuild_transactions", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    clean = run("--dry-run")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "No difference." in clean.stdout
    Transaction.objects.filter(pk=tx.pk).update(state="ROLLED_BACK", queue_offset=None)
    found = run("--dry-run")
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"{tx.pk}\tstate\t'ROLLED_BACK'\t'COMMITTED'" in found.stdout
    assert "2 difference(s) found" in found.stderr  # state and queue_offset
    repaired = run("--json")
    assert repaired.returncode == 1, repaired.stdout + repaired.stderr
    assert json.loads(repaired.stdout)["repaired"] == 2  # state and queue_offset
    assert run("--dry-run").returncode == 0
    assert Transaction.objects.get(pk=tx.pk).state == "COMMITTED"

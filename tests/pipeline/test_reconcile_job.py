"""The reconciliation job (``broker.pipeline.reconcile``) on ``local[2]`` over one synthetic
archive (``tests.pipeline.archive_builder``), judged through four windows:

- hour 0, clean: every kind of healthy transaction (committed by the producer, by a check after
  UNKNOW checks, rolled back, discarded after the check max, resumed then committed by an
  operator or by a check, one committed after the window's end), two consumer groups that
  received everything, and producer group GA laid out for hand-checked analytics;
- hour 1, planted: every anomaly kind once among clean transactions;
- hour 2, in progress: a PREPARED transaction within its checks and a delivered message whose
  half never ended, judged once with ``as_of`` right after (bucket not settled) and once hours
  later (settled).

The archive is written once and each window is run once (module fixtures).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from broker.pipeline.reconcile import JOB_CONF, output_path, reconcile
from broker.rules.anomalies import BUCKET_MS, HOUR_MS, AnomalyKind, ReconcileParams, settle_ms
from tests.pipeline.archive_builder import ArchiveBuilder

T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour's start (2023-11-14 22:00 UTC)
H1 = T0 + HOUR_MS
H2 = T0 + 2 * HOUR_MS
S = 1_000
MIN = 60 * S
CHECK_MAX = 3
BENCH = Path(__file__).resolve().parents[2] / "bench"


def params(*, since: int, until: int, as_of: int) -> ReconcileParams:
    """Check every minute, 3 checks, 6 s immunity, 10 s scans, 72 h reserved, 1 s SLA."""
    return ReconcileParams(
        since_ms=since,
        until_ms=until,
        as_of_ms=as_of,
        transaction_check_max=CHECK_MAX,
        transaction_check_interval_ms=MIN,
        transaction_timeout_ms=6 * S,
        file_reserved_ms=72 * HOUR_MS,
        visibility_sla_ms=S,
        check_scan_interval_ms=10 * S,
    )


def checked_then_discarded(tx, at: int) -> None:
    """The check max reached (UNKNOW each time), then the scan's discard."""
    for i in range(CHECK_MAX):
        tx.check(at=at + (i + 1) * MIN)
    tx.discard(at=at + (CHECK_MAX + 1) * MIN)


def clean_hour(b: ArchiveBuilder, t: int) -> None:
    """Healthy transactions of every kind, born in [t, t + 1 h)."""
    b.transaction("clean-commit", at=t + 1 * S, topic="T").commit(at=t + 1 * S + 200)
    tx = b.transaction("clean-check-commit", at=t + 2 * S, topic="T")
    tx.check(at=t + 2 * S + MIN).check(at=t + 2 * S + 2 * MIN, outcome="COMMIT_MESSAGE")
    tx.commit(at=t + 2 * S + 2 * MIN, by="check")
    b.transaction("clean-rollback", at=t + 3 * S, topic="T").rollback(at=t + 3 * S + 300)
    b.transaction("clean-check-rollback", at=t + 4 * S, topic="T").check(
        at=t + 4 * S + MIN, outcome="ROLLBACK_MESSAGE"
    ).rollback(at=t + 4 * S + MIN, by="check")
    checked_then_discarded(b.transaction("clean-discard", at=t + 5 * S, topic="T"), t + 5 * S)
    tx = b.transaction("clean-resumed-operator", at=t + 6 * S, topic="T")
    checked_then_discarded(tx, t + 6 * S)
    tx.resume(at=t + 10 * MIN).commit(at=t + 11 * MIN, by="operator")
    tx = b.transaction("clean-resumed-check", at=t + 7 * S, topic="T")
    checked_then_discarded(tx, t + 7 * S)
    tx.resume(at=t + 10 * MIN).check(at=t + 10 * MIN + S, outcome="COMMIT_MESSAGE")
    tx.commit(at=t + 10 * MIN + S, by="check")
    # Analytics group GA: resolution latencies 100, 200, 300 (commits) and 400 (rollback) ms
    # on TA, a discard and a commit on TB; unreachable 300 s, then from 60 s before the hour's
    # end until 30 s into the next.
    for i, latency in enumerate((100, 200, 300)):
        b.transaction(f"ga-{i}", at=t + 20 * S + i * S, producer_group="GA", topic="TA").commit(
            at=t + 20 * S + i * S + latency
        )
    b.transaction("ga-rollback", at=t + 30 * S, producer_group="GA", topic="TA").rollback(
        at=t + 30 * S + 400
    )
    tx = b.transaction("ga-discard", at=t + 40 * S, producer_group="GA", topic="TB")
    tx.check_undelivered(at=t + 100 * S).check_undelivered(at=t + 200 * S)
    for i in range(CHECK_MAX):
        tx.check(at=t + 400 * S + i * MIN)
    tx.discard(at=t + 400 * S + CHECK_MAX * MIN)
    tx = b.transaction("ga-late-commit", at=t + 50 * S, producer_group="GA", topic="TB")
    tx.check_undelivered(at=t + HOUR_MS - MIN).check(at=t + HOUR_MS + 30 * S)
    tx.commit(at=t + HOUR_MS + 30 * S, by="check")
    # Born before the window's end, committed after it: judged in its window, delivered in the
    # next (where its delivery has a half message older than since: not an orphan).
    b.transaction("clean-straddle", at=t + HOUR_MS - S, topic="T").commit(at=t + HOUR_MS + 500)
    b.normal_message("plain-1", at=t + 8 * S, topic="T")
    # Delay messages: one the timer moved on time, one recalled before its time.
    b.timer_deliver(b.scheduled("sched-on-time", at=t + 9 * S, due=t + 15 * S), at=t + 15 * S + 30)
    b.recall(b.scheduled("sched-recalled", at=t + 9 * S, due=t + 20 * MIN), at=t + 10 * S)


def planted_hour(b: ArchiveBuilder, t: int) -> dict[str, object]:
    """Every anomaly kind once among clean transactions, born in [t, t + 1 h); returns the
    pieces the assertions need."""
    b.transaction("ok-commit", at=t + 1 * S).commit(at=t + 1 * S + 100)
    checked_then_discarded(b.transaction("ok-discard", at=t + 2 * S), t + 2 * S)
    tx = b.transaction("hanging-1", at=t + 3 * S)
    for i in range(CHECK_MAX):
        tx.check(at=t + 3 * S + (i + 1) * MIN)
    b.transaction("lost-1", at=t + 4 * S).commit(at=t + 4 * S + 100, deliver=False)
    b.transaction("rolled-back-1", at=t + 5 * S).rollback(at=t + 5 * S + 100).deliver(
        at=t + 5 * S + 200
    )
    b.orphan_delivery("orphan-1", at=t + 6 * S, topic="T")
    b.transaction("double-1", at=t + 7 * S).commit(at=t + 7 * S + 100).op_entry(at=t + 30 * S)
    dup = b.transaction("dup-1", at=t + 8 * S).commit(at=t + 8 * S + 100)
    dup.deliver(at=t + 8 * S + 900)
    late = b.transaction("late-1", at=t + 9 * S)
    checked_then_discarded(late, t + 9 * S)
    late.end_refused(at=t + 9 * S + 5 * MIN, action="COMMIT", actor="producer")
    b.transaction("slow-1", at=t + 10 * S).commit(at=t + 10 * S + 100, visible_after_ms=2500)
    # C receives what came after it on its queue, but not it.
    undelivered = b.transaction("undelivered-1", at=t + 11 * S, queue_id=0)
    undelivered.commit(at=t + 11 * S + 100)
    b.transaction("ok-after", at=t + 12 * S, queue_id=0).commit(at=t + 12 * S + 100)
    # Group G2's producer never answers: checks undelivered, PREPARED in a settled bucket.
    b.transaction("unexplained-1", at=t + 13 * S, producer_group="G2").check_undelivered(
        at=t + 13 * S + MIN
    ).check_undelivered(at=t + 13 * S + 2 * MIN)
    # A delay message the timer never moved; one moved late, after the window's end.
    lost = b.scheduled("sched-lost", at=t + 14 * S, due=t + 20 * S, topic="T", queue_id=1)
    late_copy = b.scheduled("sched-late", at=t + 15 * S, due=t + HOUR_MS - S)
    b.timer_deliver(late_copy, at=t + HOUR_MS + 5 * S)
    return {"undelivered": undelivered.delivered[0], "dup": dup, "sched_lost": lost}


def in_progress(b: ArchiveBuilder, t: int) -> None:
    """Born in [t, t + 5 min): one PREPARED within its checks; one whose delivered message has
    a half message that never ended (orphan_delivery, no_commit); a delay message never
    delivered (scheduled_undelivered once its grace has passed)."""
    b.transaction("pending-1", at=t + 60 * S).check(at=t + 120 * S)
    b.transaction("orphan-2", at=t + 70 * S).deliver(at=t + 80 * S)
    # Due within the window, never moved: overdue only once its grace has passed.
    b.scheduled("sched-pending", at=t + 10 * S, due=t + 2 * MIN)


@pytest.fixture(scope="module")
def archive(spark, tmp_path_factory) -> dict[str, object]:
    b = ArchiveBuilder(start_ms=T0)
    clean_hour(b, T0)
    planted = planted_hour(b, H1)
    in_progress(b, H2)
    b.consume_all("C", skip=[planted["undelivered"]])
    b.consume_all("C2", topics=["T"])
    uri = str(tmp_path_factory.mktemp("archive"))
    b.write(spark, uri)
    return {"uri": uri, "out": tmp_path_factory.mktemp("runs"), **planted}


def run(spark, archive, name: str, p: ReconcileParams):
    return reconcile(
        spark,
        archive_uri=archive["uri"],
        output_uri=str(archive["out"] / name),
        params=p,
        max_anomalies=100,
        job_group=f"test-{name}",
    )


@pytest.fixture(scope="module")
def clean(spark, archive):
    return run(spark, archive, "clean", params(since=T0, until=H1, as_of=T0 + 4 * HOUR_MS))


@pytest.fixture(scope="module")
def planted(spark, archive):
    return run(spark, archive, "planted", params(since=H1, until=H2, as_of=T0 + 4 * HOUR_MS))


@pytest.fixture(scope="module")
def early(spark, archive):
    """Hour 2's first 5 minutes, judged right after them: nothing has settled."""
    return run(spark, archive, "early", params(since=H2, until=H2 + 5 * MIN, as_of=H2 + 5 * MIN))


@pytest.fixture(scope="module")
def late(spark, archive):
    """The same 5 minutes judged an hour later: their bucket has settled."""
    return run(spark, archive, "late", params(since=H2, until=H2 + 5 * MIN, as_of=H2 + HOUR_MS))


@pytest.fixture(scope="module")
def cut(spark, archive):
    """The same 5 minutes judged as soon as they have settled: their bucket's end has not (the
    window's end cuts it), but every half message judged in it has."""
    as_of = H2 + 5 * MIN + settle_ms(params(since=0, until=1, as_of=1))
    return run(spark, archive, "cut", params(since=H2, until=H2 + 5 * MIN, as_of=as_of))


def by_kind(result) -> dict[str, list]:
    found: dict[str, list] = {}
    for anomaly in result.anomalies:
        found.setdefault(anomaly.kind, []).append(anomaly)
    return found


# -- clean ------------------------------------------------------------------------------------


def test_a_clean_archive_has_no_anomaly(clean):
    assert clean.anomaly_counts == {}
    assert clean.anomalies == []
    assert clean.transactions == 14
    assert clean.states == {"PREPARED": 0, "COMMITTED": 9, "ROLLED_BACK": 3, "DISCARDED": 2}


def test_clean_buckets_balance(spark, clean):
    buckets = spark.read.parquet(output_path(clean.output_uri, "buckets")).collect()
    assert sum(row["half_count"] for row in buckets) == 14
    assert all(row["settled"] and not row["flagged"] for row in buckets)
    assert all(row["half_count"] == row["final_count"] for row in buckets)


def test_facts_of_a_resumed_transaction(spark, clean):
    facts = spark.read.parquet(output_path(clean.output_uri, "facts")).where("judged")
    row = facts.where("transaction_id = 'clean-resumed-operator'").first()
    assert row["half_messages"] == 2  # the half message and the resume's copy
    assert row["half_timestamp"] == T0 + 6 * S  # born with the first one
    assert row["check_times"] == 0  # counted again from the resume
    assert row["check_timestamps"] == [T0 + 6 * S + i * MIN for i in (1, 2, 3)]
    assert row["final_state"] == "COMMITTED"
    assert (row["end_action"], row["resolved_by"]) == ("COMMIT", "operator")
    assert row["discard_timestamp"] == T0 + 6 * S + 4 * MIN
    assert row["discard_reason"] == "check_max"
    assert row["resolution_latency_ms"] == 11 * MIN - 6 * S
    assert row["visibility_latency_ms"] == 0
    groups = {d["consumer_group"]: d for d in row["deliveries"]}
    assert set(groups) == {"C", "C2"}
    assert groups["C"]["first_delivered_timestamp"] == T0 + 11 * MIN + 100
    assert groups["C"]["attempts"] == 1
    assert groups["C"]["acked_timestamp"] == T0 + 11 * MIN + 150
    assert row["first_delivery_latency_ms"] == 100
    assert facts.count() == 14


def test_analytics_by_hand(clean):
    rows = {(r.producer_group, r.topic): r for r in clean.analytics}
    assert set(rows) == {("G", "T"), ("GA", "TA"), ("GA", "TB")}
    ta, tb = rows[("GA", "TA")], rows[("GA", "TB")]
    assert (ta.hour_ms, ta.transactions, ta.committed, ta.rolled_back) == (T0, 4, 3, 1)
    assert (ta.discarded, ta.pending, ta.discard_rate) == (0, 0, 0.0)
    # Nearest rank over 100, 200, 300, 400 ms.
    assert (ta.resolution_p50_ms, ta.resolution_p95_ms, ta.resolution_p99_ms) == (200, 400, 400)
    assert ta.check_histogram == {"0": 4}
    assert (tb.transactions, tb.committed, tb.discarded, tb.discard_rate) == (2, 1, 1, 0.5)
    assert tb.check_histogram == {"1": 1, "3": 1}
    # ga-late-commit: resolved 1 h - 50 s + 30 s after birth; alone with it, the discard.
    assert tb.resolution_p50_ms == HOUR_MS - 50 * S + 30 * S
    # Unreachable from 100 s (two undelivered checks) to the check at 400 s, and for the last
    # minute of the hour (clipped there): the same on both of GA's topics.
    assert ta.unreachable_ms == tb.unreachable_ms == 300 * S + MIN
    g = rows[("G", "T")]
    assert (g.transactions, g.committed, g.rolled_back, g.discarded) == (8, 5, 2, 1)
    assert g.unreachable_ms == 0
    assert g.check_histogram == {"0": 4, "1": 2, "2": 1, "3": 1}


# -- planted ----------------------------------------------------------------------------------


def test_every_kind_found_exactly_once(planted):
    assert planted.anomaly_counts == {kind: 1 for kind in AnomalyKind.values}
    assert len(planted.anomalies) == len(AnomalyKind.values)


def test_each_anomaly_names_its_transaction(planted):
    named = {a.kind: (a.transaction_id, a.msg_id) for a in planted.anomalies}
    assert named == {
        "hanging": ("hanging-1", "hanging-1"),
        "lost_commit": ("lost-1", "lost-1"),
        "rolled_back_but_delivered": ("rolled-back-1", "rolled-back-1"),
        "orphan_delivery": ("", "orphan-1"),
        "double_resolution": ("double-1", "double-1"),
        "duplicate_delivery": ("dup-1", "dup-1"),
        "late_end": ("late-1", "late-1"),
        "undelivered_to_group": ("undelivered-1", "undelivered-1"),
        "slow_visibility": ("slow-1", "slow-1"),
        "bucket_mismatch": ("", ""),
        "scheduled_undelivered": ("", "sched-lost"),
    }
    # Ordered by kind, then transaction id.
    assert [a.kind for a in planted.anomalies] == sorted(AnomalyKind.values)


def test_evidence(planted, archive):
    found = {a.kind: a for a in planted.anomalies}
    assert found["hanging"].evidence == {
        "reason": "check_max",
        "check_times": 3,
        "last_check_timestamp": H1 + 3 * S + 3 * MIN,
        "half_timestamp": H1 + 3 * S,
        "as_of": T0 + 4 * HOUR_MS,
    }
    assert found["lost_commit"].evidence == {
        "resolved_timestamp": H1 + 4 * S + 100,
        "resolved_by": "producer",
        "topic": "T",
    }
    rolled_back = found["rolled_back_but_delivered"].evidence
    assert rolled_back["final_state"] == "ROLLED_BACK"
    assert len(rolled_back["delivered_commit_log_offsets"]) == 1
    orphan = found["orphan_delivery"]
    assert orphan.evidence["reason"] == "no_half_message"
    assert orphan.evidence["store_timestamps"] == [H1 + 6 * S]
    assert (orphan.producer_group, orphan.topic) == ("G", "T")
    double = found["double_resolution"].evidence
    assert [len(e["op_commit_log_offsets"]) for e in double["op_entries"]] == [2]
    assert [r["action"] for r in double["resolutions"]] == ["COMMIT"]
    dup = found["duplicate_delivery"]
    assert dup.topic == "T"
    assert dup.evidence["commit_log_offsets"] == [
        m.commit_log_offset for m in archive["dup"].delivered
    ]
    assert dup.evidence["queue_offsets"] == [m.queue_offset for m in archive["dup"].delivered]
    assert found["late_end"].evidence == {
        "discard_timestamp": H1 + 9 * S + 4 * MIN,
        "end_timestamp": H1 + 9 * S + 5 * MIN,
        "end_action": "COMMIT",
        "actor": "producer",
        "accepted": False,
    }
    message = archive["undelivered"]
    undelivered = found["undelivered_to_group"].evidence
    assert undelivered["consumer_group"] == "C"  # C2 received it
    assert (undelivered["topic"], undelivered["queue_id"]) == ("T", message.queue_id)
    assert undelivered["queue_offset"] == message.queue_offset
    assert undelivered["commit_log_offset"] == message.commit_log_offset
    assert undelivered["group_max_queue_offset"] > message.queue_offset
    assert found["slow_visibility"].evidence == {
        "resolved_timestamp": H1 + 10 * S + 100,
        "visible_timestamp": H1 + 10 * S + 2600,
        "latency_ms": 2500,
        "sla_ms": S,
    }
    bucket = found["bucket_mismatch"]
    assert bucket.producer_group == "G2"
    assert bucket.evidence == {
        "bucket_start_ms": H1,
        "bucket_end_ms": H1 + BUCKET_MS,
        "half_count": 1,
        "final_count": 0,
        "unexplained_count": 1,
        "unexplained_transaction_ids": ["unexplained-1"],
    }
    scheduled = found["scheduled_undelivered"]
    assert (scheduled.producer_group, scheduled.topic) == ("G", "T")
    assert scheduled.evidence == {
        "commit_log_offset": archive["sched_lost"].commit_log_offset,
        "queue_id": 1,
        "scheduled_timestamp": H1 + 14 * S,
        "delivery_timestamp": H1 + 20 * S,
        "grace_ms": settle_ms(planted.params),
        "as_of": T0 + 4 * HOUR_MS,
    }


def test_parquet_outputs_match_the_result(spark, planted):
    anomalies = spark.read.parquet(output_path(planted.output_uri, "anomalies"))
    assert anomalies.count() == sum(planted.anomaly_counts.values())
    assert anomalies.columns == [
        "kind",
        "transaction_id",
        "msg_id",
        "producer_group",
        "topic",
        "evidence",
    ]
    facts = spark.read.parquet(output_path(planted.output_uri, "facts")).where("judged")
    assert facts.count() == planted.transactions == 12
    flagged = spark.read.parquet(output_path(planted.output_uri, "buckets")).where("flagged")
    assert [(r["producer_group"], r["bucket_start_ms"]) for r in flagged.collect()] == [("G2", H1)]


def test_the_duckdb_same_work_baseline_writes_the_same_outputs(
    archive, clean, planted, early, late, cut
):
    """bench/reconcile_same_work.py (DuckDB) applies the same rules to the same archive: its
    facts, anomalies, buckets and analytics equal the job's (bench/reconcile_compare.py), in
    every window, so the bench compares two programs doing the same work."""
    sys.path.insert(0, str(BENCH))
    try:
        from reconcile_compare import compare
        from reconcile_same_work import same_work
    finally:
        sys.path.remove(str(BENCH))
    for name, result in (
        ("clean", clean),
        ("planted", planted),
        ("early", early),
        ("late", late),
        ("cut", cut),
    ):
        duck = archive["out"] / f"{name}-duckdb"
        counts = same_work(archive["uri"], str(duck), result.params)
        assert counts == result.anomaly_counts
        assert compare(result.output_uri, duck) == [], name


# -- the window -------------------------------------------------------------------------------


def test_in_progress_transactions_are_not_anomalies_yet(early):
    assert H2 + BUCKET_MS + settle_ms(params(since=0, until=1, as_of=1)) > H2 + 5 * MIN
    assert early.transactions == 2
    assert early.states["PREPARED"] == 2
    # pending-1 is within its checks: not hanging; its bucket has not settled: not flagged.
    assert early.anomaly_counts == {"orphan_delivery": 1}
    (orphan,) = early.anomalies
    assert (orphan.transaction_id, orphan.evidence["reason"]) == ("orphan-2", "no_commit")


def test_a_settled_bucket_is_flagged(early, late):
    assert late.anomaly_counts == {
        "orphan_delivery": 1,
        "bucket_mismatch": 1,
        "scheduled_undelivered": 1,
    }
    bucket = by_kind(late)["bucket_mismatch"][0]
    # orphan-2 is named by its own anomaly; pending-1 is the unexplained one.
    assert bucket.evidence["unexplained_transaction_ids"] == ["pending-1"]
    assert (bucket.evidence["half_count"], bucket.evidence["final_count"]) == (2, 0)


def test_a_bucket_cut_by_the_window_is_balanced_once_its_part_has_settled(cut):
    assert H2 + BUCKET_MS + settle_ms(params(since=0, until=1, as_of=1)) > cut.params.as_of_ms
    assert cut.anomaly_counts == {
        "orphan_delivery": 1,
        "bucket_mismatch": 1,
        "scheduled_undelivered": 1,
    }
    bucket = by_kind(cut)["bucket_mismatch"][0]
    assert bucket.evidence["unexplained_transaction_ids"] == ["pending-1"]


def test_window_must_be_inside_the_archive(spark, archive):
    with pytest.raises(ValueError):
        run(spark, archive, "bad", params(since=H1, until=H1, as_of=H2))
    with pytest.raises(ValueError):
        run(spark, archive, "bad", params(since=H1, until=H2 + 1, as_of=H2))


def test_the_job_puts_the_sessions_settings_back(spark, archive):
    """The pipeline worker's session outlives a run: the job's own settings (JOB_CONF) are
    set for the run only; one the session had is restored, one it had not is unset again."""
    shuffle = "spark.sql.shuffle.partitions"
    assert shuffle in JOB_CONF
    before = spark.conf.get(shuffle)
    window = params(since=T0, until=H1, as_of=T0 + 4 * HOUR_MS)
    try:
        spark.conf.set(shuffle, "3")
        run(spark, archive, "settings", window)
        assert spark.conf.get(shuffle) == "3"
        spark.conf.unset(shuffle)
        run(spark, archive, "settings-unset", window)
        assert spark.conf.get(shuffle, None) is None
    finally:
        spark.conf.set(shuffle, before)

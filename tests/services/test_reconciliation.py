"""Running the reconciliation (``broker.services.reconciliation.run``): the window and its
defaults, one run at a time, failures, the decision not to run recorded as a skipped run,
storing a result (the real job's, and constructed ones), the beat entry and task, and the
Spark progress tracker."""

from __future__ import annotations

import inspect
import io
import re
import time

import pytest
from django.core.management import call_command
from django_celery_beat import schedulers as beat_schedulers
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

import tasks.pipeline
from broker.errors import Conflict, InvalidInput
from broker.models import (
    Message,
    ReconciliationAnalytics,
    ReconciliationAnomaly,
    ReconciliationRun,
    ScanLease,
)
from broker.pipeline import reconcile as reconcile_module
from broker.pipeline.result import ReconcileResult
from broker.plumbing.leases import lease_acquire
from broker.rules.anomalies import settle_ms
from broker.rules.audit import iso_utc
from broker.rules.clock import now_ms
from broker.selectors.reconciliation import reconciliation_params
from broker.services.reconciliation import run as service
from broker.services.reconciliation.run import (
    RECONCILE_LEASE,
    RECONCILE_TASK,
    ReconciliationSkipped,
    reconciliation_result_store,
    reconciliation_run,
    reconciliation_run_queue,
    reconciliation_run_scheduled,
)
from broker.services.reconciliation.window import reconciliation_window
from tasks.celery import app as celery_app
from tests.services.reconciliation_runs import (  # the fixture fake_job, too
    HOUR,
    T0,
    FakeJob,
    analytics_row,
    anomaly,
    archived,
    fake_job_install,
    stored_run,
)
from tests.support import prepare

pytestmark = pytest.mark.django_db

AS_OF = T0 + 6 * HOUR


@pytest.fixture
def fake_job(monkeypatch, settings, tmp_path) -> FakeJob:
    return fake_job_install(monkeypatch, settings, tmp_path)


def settle() -> int:
    return settle_ms(reconciliation_params(since_ms=0, until_ms=0, as_of_ms=0))


# --- The window ---------------------------------------------------------------------------------


def test_nothing_archived_yet_is_refused_clearly():
    with pytest.raises(InvalidInput) as caught:
        reconciliation_window()
    assert caught.value.code == "archive_empty"
    assert "Nothing is archived yet" in caught.value.message


def test_the_first_window_runs_from_the_archive_start_to_what_has_settled(broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    archived(AS_OF, segment_starts=(T0 + 600_000, T0))

    params = reconciliation_window()

    assert (params.since_ms, params.until_ms, params.as_of_ms) == (T0, AS_OF - settle(), AS_OF)
    assert params.transaction_check_max == 3
    assert params.file_reserved_ms == 72 * HOUR


def test_a_window_starts_where_the_last_successful_run_ended():
    archived(AS_OF)
    stored_run(since=T0, until=T0 + HOUR)
    ReconciliationRun.objects.create(  # a later failed run does not move the start
        state="failed", trigger="beat", since_timestamp=T0 + HOUR,
        until_timestamp=T0 + 2 * HOUR, as_of_timestamp=AS_OF, spark_master="local[2]",
    )  # fmt: skip

    assert reconciliation_window().since_ms == T0 + HOUR
    stored_run(since=T0 - 2 * HOUR, until=T0 - HOUR)  # a later run over an older window
    assert reconciliation_window().since_ms == T0 + HOUR  # does not move it back


def test_an_until_past_the_archive_is_refused_not_clamped():
    archived(AS_OF)

    with pytest.raises(InvalidInput) as caught:
        reconciliation_window(until_ms=AS_OF + 1)

    assert caught.value.code == "until_past_archive"
    assert caught.value.details == {"until": AS_OF + 1, "as_of": AS_OF}
    assert reconciliation_window(until_ms=AS_OF).until_ms == AS_OF  # up to as_of is fine


def test_an_empty_window_is_nothing_to_reconcile():
    archived(AS_OF)
    with pytest.raises(InvalidInput) as caught:
        reconciliation_window(since_ms=T0 + HOUR, until_ms=T0 + HOUR)
    assert caught.value.code == "nothing_to_reconcile"


# --- Running ------------------------------------------------------------------------------------


def test_a_run_calls_the_job_with_its_window_and_stores_the_result(fake_job, settings):
    archived(AS_OF)

    run = reconciliation_run(since_ms=T0, until_ms=T0 + HOUR, trigger="command")

    (call,) = fake_job.calls
    assert call["params"].since_ms == T0 and call["params"].until_ms == T0 + HOUR
    assert call["params"].as_of_ms == AS_OF
    assert call["archive_uri"] == settings.HALFMOON_ARCHIVE_URI
    assert call["output_uri"] == f"{settings.HALFMOON_ARCHIVE_URI}/reconciliation/run={run.pk}"
    assert call["max_anomalies"] == 10000
    assert call["job_group"] == f"halfmoon-reconcile-{run.pk}"
    run.refresh_from_db()
    assert run.state == "succeeded" and run.trigger == "command"
    assert run.output_uri == call["output_uri"]
    assert run.spark_master == settings.HALFMOON_SPARK_MASTER
    assert run.params["since_ms"] == T0 and run.params["transaction_check_max"] == 15
    assert (run.transactions, run.states) == (3, {"COMMITTED": 2, "ROLLED_BACK": 1})
    assert run.anomaly_counts == {"lost_commit": 1} and run.anomalies_stored == 1
    assert run.finished_timestamp >= run.started_timestamp
    assert list(run.anomalies.values_list("kind", "transaction_id")) == [("lost_commit", "TX1")]
    assert run.analytics.get().committed == 2


def test_a_second_run_while_one_holds_the_lease_is_refused(fake_job):
    archived(AS_OF)
    assert lease_acquire(name=RECONCILE_LEASE, owner="another-worker", ttl_ms=60_000)

    with pytest.raises(Conflict) as caught:
        reconciliation_run(trigger="command")

    assert caught.value.code == "reconciliation_running"
    assert not ReconciliationRun.objects.exists() and not fake_job.calls


def test_a_failing_job_leaves_the_run_failed_with_its_error_and_frees_the_lease(fake_job):
    archived(AS_OF)
    fake_job.error = RuntimeError("executor lost")

    with pytest.raises(RuntimeError) as caught:
        reconciliation_run(trigger="command")

    run = ReconciliationRun.objects.get()
    assert run.state == "failed" and run.finished_timestamp is not None
    assert run.error.startswith("RuntimeError: executor lost")
    assert f"Reconciliation run {run.pk} is FAILED" in caught.value.__notes__[0]
    assert not run.anomalies.exists()
    fake_job.error = None  # the lease is free again: the next run goes ahead
    assert reconciliation_run(trigger="command").state == "succeeded"


@pytest.mark.django_db(transaction=True)  # the lease keeper renews from its own connection
def test_a_run_whose_lease_was_lost_is_failed_and_its_result_not_stored(fake_job, monkeypatch):
    archived(AS_OF)
    monkeypatch.setattr(service, "LEASE_TTL_MS", 300)  # renewed every 100 ms
    job = fake_job.__call__

    def job_losing_the_lease(spark, **kwargs):
        # Meanwhile the lease expired and another process took it (and may run this window).
        ScanLease.objects.filter(name=RECONCILE_LEASE).update(
            owner="another-worker", expires_timestamp=2**62
        )
        time.sleep(0.5)
        return job(spark, **kwargs)

    monkeypatch.setattr(reconcile_module, "reconcile", job_losing_the_lease)

    with pytest.raises(RuntimeError, match="lease was lost"):
        reconciliation_run(trigger="command")

    run = ReconciliationRun.objects.get()
    assert run.state == "failed" and "lease was lost" in run.error
    assert not run.anomalies.exists() and not run.analytics.exists()
    assert run.transactions == 0 and run.anomaly_counts == {}


def test_a_run_left_running_by_a_dead_process_is_failed_by_the_next(fake_job):
    archived(AS_OF)
    dead = ReconciliationRun.objects.create(
        trigger="beat", since_timestamp=T0, until_timestamp=T0 + HOUR, as_of_timestamp=AS_OF,
        spark_master="local[2]",
    )  # fmt: skip

    reconciliation_run(trigger="command")

    dead.refresh_from_db()
    assert dead.state == "failed" and dead.error.startswith("Interrupted")


def test_storing_keeps_at_most_the_configured_anomalies_and_every_count(broker_settings):
    broker_settings["HALFMOON_RECONCILE_MAX_STORED_ANOMALIES"] = 2
    found = [anomaly("hanging", f"TX{i}", check_times=15) for i in range(3)]

    run = stored_run(
        anomalies=found,
        anomaly_counts={"hanging": 3, "lost_commit": 0},
        analytics=[analytics_row("G", "TranTest", T0, committed=1)],
    )

    assert run.anomaly_counts == {"hanging": 3}  # kinds with no anomaly are left out
    assert run.anomalies_stored == 2
    assert [a.transaction_id for a in run.anomalies.order_by("id")] == ["TX0", "TX1"]
    assert run.anomalies.first().evidence == {"check_times": 15}

    result = ReconcileResult(
        params=reconciliation_params(since_ms=T0, until_ms=T0 + HOUR, as_of_ms=AS_OF),
        transactions=1,
        states={"COMMITTED": 1},
        anomaly_counts={},
        output_uri="elsewhere",
    )
    reconciliation_result_store(run, result)  # stored again: replaced, not added

    assert not ReconciliationAnomaly.objects.filter(run=run).exists()
    assert not ReconciliationAnalytics.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert (run.anomalies_stored, run.anomaly_counts, run.output_uri) == (0, {}, "elsewhere")


def test_the_scheduled_run_runs_only_when_something_new_has_settled(fake_job):
    nothing_archived = ReconciliationRun.objects.get(pk=reconciliation_run_scheduled())
    archived(AS_OF)

    run_id = reconciliation_run_scheduled()

    run = ReconciliationRun.objects.get(pk=run_id)
    assert run.state == "succeeded" and run.trigger == "beat"
    assert run.until_timestamp == AS_OF - settle()
    nothing_new = ReconciliationRun.objects.get(pk=reconciliation_run_scheduled())
    assert [nothing_archived.state, nothing_new.state] == ["skipped", "skipped"]
    assert len(fake_job.calls) == 1  # Spark ran once
    with pytest.raises(InvalidInput) as caught:  # a skip moves nothing
        reconciliation_window()
    assert caught.value.details["since"] == run.until_timestamp


# --- Skipped runs -------------------------------------------------------------------------------


def test_with_nothing_archived_the_decision_is_a_skipped_run_saying_why(
    fake_job, topic, producer_group
):
    tx = prepare()  # a transaction waits: the archive export has not run yet
    stored = Message.objects.get(pk=tx.half_commit_log_offset).store_timestamp

    with pytest.raises(ReconciliationSkipped) as caught:
        reconciliation_run(trigger="console:alice")

    run = ReconciliationRun.objects.get()
    assert caught.value.run == run and caught.value.code == "archive_empty"
    assert caught.value.details == {"run": run.pk, "settles_timestamp": stored + settle()}
    assert run.state == "skipped" and run.trigger == "console:alice"
    assert (run.since_timestamp, run.until_timestamp, run.as_of_timestamp) == (None, None, None)
    assert run.started_timestamp == run.finished_timestamp
    assert run.settles_timestamp == stored + settle()
    assert run.reason.startswith("Nothing is archived yet")
    assert f"settles at {iso_utc(stored + settle())}" in run.reason
    assert (
        caught.value.message == f"{run.reason} Recorded as reconciliation run {run.pk} (skipped)."
    )
    assert not fake_job.calls and not run.anomalies.exists()
    assert not ScanLease.objects.filter(
        name=RECONCILE_LEASE, expires_timestamp__gt=now_ms()
    ).exists()


def test_with_nothing_settled_the_skip_names_the_oldest_transaction_not_yet_judged(
    fake_job, topic, producer_group
):
    older, newer = prepare(), prepare()
    stored = [
        Message.objects.get(pk=tx.half_commit_log_offset).store_timestamp for tx in (older, newer)
    ]
    as_of = stored[1] + 1000  # the archive reaches both; neither has settled
    archived(as_of)
    stored_run(since=stored[0] - HOUR, until=stored[0], as_of=as_of)  # the last run ended there

    with pytest.raises(ReconciliationSkipped) as caught:
        reconciliation_run(trigger="beat")

    run = caught.value.run
    assert caught.value.code == "nothing_to_reconcile"
    assert caught.value.details["since"] == stored[0] == run.since_timestamp
    assert (run.until_timestamp, run.as_of_timestamp) == (as_of - settle(), as_of)
    assert run.settles_timestamp == stored[0] + settle()  # the older of the two
    assert run.reason.startswith("Nothing to reconcile")
    assert f"half message stored {iso_utc(stored[0])}" in run.reason


def test_a_skip_with_no_transaction_waiting_says_so(fake_job):
    archived(AS_OF)
    stored_run(since=T0, until=AS_OF - settle(), as_of=AS_OF)

    run_id = reconciliation_run_scheduled()

    run = ReconciliationRun.objects.get(pk=run_id)
    assert run.state == "skipped" and run.settles_timestamp is None
    assert f"No half message has been stored since {iso_utc(AS_OF - settle())}" in run.reason


def test_a_window_the_caller_gives_is_refused_not_recorded(fake_job):
    with pytest.raises(InvalidInput) as nothing_archived:
        reconciliation_run(since_ms=T0, trigger="command")
    archived(AS_OF)
    with pytest.raises(InvalidInput) as empty:
        reconciliation_run(since_ms=T0 + HOUR, until_ms=T0 + HOUR, trigger="command")
    with pytest.raises(InvalidInput) as past:
        reconciliation_run(until_ms=AS_OF + 1, trigger="command")

    assert [e.value.code for e in (nothing_archived, empty, past)] == [
        "archive_empty", "nothing_to_reconcile", "until_past_archive",
    ]  # fmt: skip
    assert not any(isinstance(e.value, ReconciliationSkipped) for e in (nothing_archived, empty))
    assert not ReconciliationRun.objects.exists()


def test_the_scheduled_run_records_nothing_while_another_runs(fake_job):
    lease_acquire(name=RECONCILE_LEASE, owner="another-worker", ttl_ms=60_000)
    assert reconciliation_run_scheduled() is None  # even with nothing archived: no skip
    assert not fake_job.calls and not ReconciliationRun.objects.exists()


# --- Beat ---------------------------------------------------------------------------------------


def test_beat_has_a_daily_reconciliation_entry_at_three_utc():
    entry = PeriodicTask.objects.get(name="halfmoon-reconcile")

    assert entry.task == RECONCILE_TASK == "tasks.pipeline.reconcile"
    assert entry.enabled and entry.interval is None and entry.crontab is not None
    cron = entry.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == (
        "0", "3", "*", "*", "*",
    )  # fmt: skip
    assert str(cron.timezone) == "UTC"
    assert entry.task in celery_app.tasks
    assert celery_app.amqp.router.route({}, entry.task)["queue"].name == "pipeline"


def test_an_operators_edit_of_the_entry_survives_beat_starting(monkeypatch):
    # The scheduler closes "old" connections between reads; here that is the test's own.
    monkeypatch.setattr(beat_schedulers, "close_old_connections", lambda: None)
    entry = PeriodicTask.objects.get(name="halfmoon-reconcile")
    entry.crontab.hour = "5"
    entry.crontab.save()

    scheduler = DatabaseScheduler(app=celery_app, lazy=True)
    scheduler.setup_schedule()

    entry.refresh_from_db()
    assert entry.crontab.hour == "5" and entry.task == RECONCILE_TASK
    assert PeriodicTask.objects.filter(task=RECONCILE_TASK).count() == 1


def test_the_beat_task_is_the_scheduled_service(monkeypatch):
    calls = []
    monkeypatch.setattr(service, "reconciliation_run_scheduled", lambda **kw: calls.append(kw) or 7)

    assert tasks.pipeline.reconcile() == 7  # beat: no arguments
    assert tasks.pipeline.reconcile(trigger="console:alice") == 7  # the console's Run now
    assert calls == [{"trigger": "beat"}, {"trigger": "console:alice"}]


def test_run_now_queues_the_task_with_its_trigger_once_committed(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent = []

    class App:
        def send_task(self, name: str, **options: object) -> None:
            sent.append((name, options))

    monkeypatch.setattr(service, "current_app", App())
    with django_capture_on_commit_callbacks(execute=False) as queued:
        reconciliation_run_queue(trigger="console:alice")
    assert sent == [] and len(queued) == 1  # nothing is sent before the commit

    queued[0]()

    (name, options) = sent[0]
    assert name == RECONCILE_TASK and options == {"kwargs": {"trigger": "console:alice"}}
    inspect.signature(tasks.pipeline.reconcile.run).bind(**options["kwargs"])


# --- The real job, on Spark (local[2]) ----------------------------------------------------------

REAL_CHECK_MAX = 3
REAL_INTERVAL_MS = 10_000


@pytest.fixture(scope="module")
def real_archive(spark, tmp_path_factory) -> str:
    """An archive written by the pipeline's own builder: clean committed, rolled back and
    discarded (after the check max) transactions, one commit never delivered (lost_commit)
    and one delivered twice (duplicate_delivery); consumer group C received everything."""
    from tests.pipeline.archive_builder import ArchiveBuilder

    uri = str(tmp_path_factory.mktemp("archive"))
    b = ArchiveBuilder(start_ms=T0)
    for i in range(4):
        b.transaction(f"tx-commit-{i}", at=T0 + 1_000 * (i + 1)).commit(at=T0 + 1_000 * i + 1_200)
    b.transaction("tx-rollback", at=T0 + 6_000).rollback(at=T0 + 6_300, by="check")
    tx = b.transaction("tx-discard", at=T0 + 7_000)
    for i in range(REAL_CHECK_MAX):
        tx.check(at=T0 + 7_000 + REAL_INTERVAL_MS * (i + 1))
    tx.discard(at=T0 + 7_000 + REAL_INTERVAL_MS * (REAL_CHECK_MAX + 1))
    b.transaction("tx-lost", at=T0 + 8_000).commit(at=T0 + 8_200, deliver=False)
    dup = b.transaction("tx-dup", at=T0 + 9_000).commit(at=T0 + 9_100)
    dup.deliver(at=T0 + 9_150)
    b.consume_all("C", delay_ms=100)
    b.write(spark, uri)
    return uri


@pytest.fixture
def real_settings(broker_settings, settings, real_archive, monkeypatch) -> None:
    # The lease row is written in the test's own uncommitted transaction, which the lease
    # keeper's connection cannot see: a renewal during a slow job would wait on it forever.
    monkeypatch.setattr(service, "LEASE_TTL_MS", 3_600_000)
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = REAL_CHECK_MAX
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = REAL_INTERVAL_MS
    settings.HALFMOON_ARCHIVE_URI = real_archive
    archived(T0 + 2 * HOUR)


@pytest.mark.usefixtures("real_settings")
def test_a_real_job_run_is_stored_with_its_progress(spark):
    from broker.pipeline.spark import HadoopFiles

    events = []

    run = reconciliation_run(trigger="command", progress=events.append)

    run.refresh_from_db()
    assert run.state == "succeeded", run.error
    assert (run.since_timestamp, run.as_of_timestamp) == (T0, T0 + 2 * HOUR)
    assert run.transactions == 8
    assert run.states == {"COMMITTED": 6, "ROLLED_BACK": 1, "DISCARDED": 1, "PREPARED": 0}
    assert run.anomaly_counts == {"lost_commit": 1, "duplicate_delivery": 1}
    stored = sorted(run.anomalies.values_list("kind", "transaction_id"))
    assert stored == [("duplicate_delivery", "tx-dup"), ("lost_commit", "tx-lost")]
    lost = run.anomalies.get(kind="lost_commit")
    assert lost.evidence["resolved_timestamp"] == T0 + 8_200
    assert (lost.producer_group, lost.topic) == ("G", "T")
    (row,) = run.analytics.all()
    assert (row.producer_group, row.topic, row.hour_timestamp) == ("G", "T", T0)
    assert (row.transactions, row.committed, row.rolled_back, row.discarded) == (8, 6, 1, 1)
    assert HadoopFiles(spark).exists(f"{run.output_uri}/anomalies")
    assert events, "the progress callback was never called"
    last = events[-1]
    assert last.jobs_total > 0 and last.jobs_done == last.jobs_total
    assert last.tasks_total > 0 and last.tasks_done == last.tasks_total
    assert all(e.tasks_done <= e.tasks_total for e in events)


def test_progress_follows_only_its_job_group(spark):
    from broker.pipeline.progress import SparkProgress, progress_read
    from broker.pipeline.spark import job_group

    events = []
    spark.range(100).count()  # a job outside the group
    with (
        SparkProgress(spark.sparkContext, "progress-test", events.append, interval_s=0.05),
        job_group(spark, "progress-test", "a test job"),
    ):
        frame = spark.range(0, 10_000, numPartitions=4).selectExpr("id % 7 AS k")
        frame.groupBy("k").count().collect()

    last = events[-1]
    assert last == progress_read(spark.sparkContext, "progress-test")
    assert last.jobs_done == last.jobs_total >= 1
    assert last.tasks_done == last.tasks_total >= 4  # the 4 partitions' tasks at least
    assert last.stage == ""  # nothing running any more
    assert progress_read(spark.sparkContext, "no-such-group").jobs_total == 0


@pytest.mark.usefixtures("real_settings")
def test_the_command_runs_the_real_job_with_a_progress_bar(capsys):
    out = io.StringIO()

    call_command("reconcile", "--since", "2027-01-15T08:00:00Z", stdout=out)

    run = ReconciliationRun.objects.get()
    summary = out.getvalue()
    assert f"Reconciliation run {run.pk} succeeded" in summary
    assert "Transactions judged: 8" in summary
    assert (
        "  duplicate_delivery         1" in summary and "  lost_commit                1" in summary
    )
    bar = capsys.readouterr().err
    assert re.search(r"jobs (\d+)/\1.*\b(\d+)/\2 \[", bar), bar[-500:]  # ends all done

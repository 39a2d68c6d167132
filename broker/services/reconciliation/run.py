"""Running the reconciliation (``broker.pipeline.reconcile``) over the archive and keeping its
summary: one ``ReconciliationRun`` per run, with its anomalies (at most
HALFMOON_RECONCILE_MAX_STORED_ANOMALIES; all of them stay in the run's Parquet output) and
analytics rows, which the API (``/api/v1/reconciliation/runs/...``), the console and the
admin read.

More: docs/design.md, "Module notes", broker/services/reconciliation/run.py."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from celery import current_app
from django.conf import settings
from django.db import transaction

from broker.conf import conf
from broker.errors import Conflict, InvalidInput
from broker.models import ReconciliationAnalytics, ReconciliationAnomaly, ReconciliationRun
from broker.pipeline.schema import run_output_path
from broker.plumbing.leases import LeaseKeeper, lease_acquire, lease_owner, lease_release
from broker.rules.anomalies import ReconcileParams
from broker.rules.audit import iso_utc
from broker.rules.clock import now_ms
from broker.selectors.reconciliation import half_message_first_stored, reconciliation_settle_ms
from broker.services.reconciliation.window import reconciliation_window

if TYPE_CHECKING:  # Spark is imported only by the process that runs the job
    from broker.pipeline.progress import ProgressEvent
    from broker.pipeline.result import ReconcileResult


logger = logging.getLogger("halfmoon.reconciliation")


RECONCILE_TASK = "tasks.pipeline.reconcile"


RECONCILE_LEASE = "reconcile"


LEASE_TTL_MS = 60_000  # renewed every 20 s while the job runs; a dead runner frees it in 60 s


STORE_BATCH = 1000  # anomalies or analytics rows per INSERT (~1 MB of evidence at most)


SKIP_CODES = ("archive_empty", "nothing_to_reconcile")  # refusals of the default window


class ReconciliationSkipped(InvalidInput):
    """A run of the default window could not start and was recorded as SKIPPED: ``run`` is
    that run (its ``reason`` and ``settles_timestamp``). Keeps the refusal's ``code``
    (``archive_empty`` or ``nothing_to_reconcile``) and ``details`` (plus ``run``, the run's
    id, and ``settles_timestamp``); the message is the reason and names the run."""

    def __init__(self, run: ReconciliationRun, refusal: InvalidInput) -> None:
        super().__init__(
            f"{run.reason} Recorded as reconciliation run {run.pk} (skipped).",
            code=refusal.code,
            details={
                **(refusal.details or {}),
                "run": run.pk,
                "settles_timestamp": run.settles_timestamp,
            },
        )
        self.run = run


def _interrupted_runs_fail() -> int:
    """Mark FAILED the runs left RUNNING by a process that died (call under the lease: no
    other run is live). Returns how many."""
    return ReconciliationRun.objects.filter(state=ReconciliationRun.State.RUNNING).update(
        state=ReconciliationRun.State.FAILED,
        finished_timestamp=now_ms(),
        error="Interrupted: the process running it stopped before it finished.",
    )


def reconciliation_run(
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    trigger: str,
    progress: Callable[[ProgressEvent], None] | None = None,
) -> ReconciliationRun:
    """Run the reconciliation job over ``[since_ms, until_ms)`` (defaults: module docstring)
    on this process's Spark session (``broker.pipeline.spark.spark_session``, master
    HALFMOON_SPARK_MASTER) and store its summary.

    Args:
        since_ms, until_ms: the window of half message store times (ms since the epoch).
        trigger: who asked, kept on the run: ``command``, ``beat`` or ``console:<username>``.
        progress: called with a ``broker.pipeline.progress.ProgressEvent`` about every 0.5 s
            while Spark works (from another thread), and once at the end.

    Returns:
        the run, SUCCEEDED, with its counts; anomalies and analytics stored
        (``reconciliation_result_store``). Its Parquet output lies at ``run.output_uri``
        (``{HALFMOON_ARCHIVE_URI}/reconciliation/run={id}``).

    Raises:
        ReconciliationSkipped: the default window (neither ``since_ms`` nor ``until_ms``
            given) is refused as ``archive_empty`` or ``nothing_to_reconcile``; the decision
            is stored as a SKIPPED run (``reconciliation_skip_record``), ``exc.run``.
        InvalidInput: a window given by the caller (``reconciliation_window``).
        Conflict: ``reconciliation_running``, another run holds the lease.
        RuntimeError: the lease was lost while the job ran (``LeaseKeeper.lost``); the run is
            then FAILED and its result not stored.
        Exception: whatever the job raised; the run is then FAILED with the error text.
    """
    owner = lease_owner()
    if not lease_acquire(name=RECONCILE_LEASE, owner=owner, ttl_ms=LEASE_TTL_MS):
        raise Conflict(
            "A reconciliation is already running; wait for it to finish.",
            code="reconciliation_running",
        )
    keeper = LeaseKeeper(name=RECONCILE_LEASE, owner=owner, ttl_ms=LEASE_TTL_MS)
    keeper.start()
    try:
        _interrupted_runs_fail()
        try:
            params = reconciliation_window(since_ms=since_ms, until_ms=until_ms)
        except InvalidInput as refusal:
            if since_ms is not None or until_ms is not None or refusal.code not in SKIP_CODES:
                raise
            skipped = reconciliation_skip_record(trigger=trigger, refusal=refusal)
            raise ReconciliationSkipped(skipped, refusal) from None
        run = ReconciliationRun.objects.create(
            trigger=trigger,
            since_timestamp=params.since_ms,
            until_timestamp=params.until_ms,
            as_of_timestamp=params.as_of_ms,
            spark_master=settings.HALFMOON_SPARK_MASTER,
            params=dataclasses.asdict(params),
        )
        run.output_uri = run_output_path(settings.HALFMOON_ARCHIVE_URI, run.pk, "").rstrip("/")
        run.save(update_fields=["output_uri"])
        try:
            result = _job_run(run, params, progress)
            if keeper.lost:
                # Another process may have taken the lease, failed this run and started its
                # own over the same window: storing this one too would count it twice.
                raise RuntimeError(
                    "The reconciliation lease was lost while the job ran (the database did "
                    "not answer its renewals); the result was not stored."
                )
            reconciliation_result_store(run, result)
        except BaseException as exc:
            _run_fail(run, exc)
            raise
    finally:
        keeper.stop()
        lease_release(name=RECONCILE_LEASE, owner=owner)
    logger.info(
        "reconciliation run %d: %d transactions, anomalies %s",
        run.pk,
        run.transactions,
        run.anomaly_counts,
    )
    return run


def reconciliation_skip_record(*, trigger: str, refusal: InvalidInput) -> ReconciliationRun:
    """Store the decision not to run as a SKIPPED run (finished when started) for ``trigger``:
    the window ``refusal`` (``archive_empty`` or ``nothing_to_reconcile``, from
    ``reconciliation_window``) saw (``since``, ``until``, ``as_of`` from its details; None
    with nothing archived), its ``reason`` (the refusal's message, then when the oldest
    transaction not yet judged settles, or that none is stored) and ``settles_timestamp``
    (that time, ms: the first half message stored at or after ``since`` plus
    ``reconciliation_settle_ms``; None when there is no such half message). Returns the run."""
    details = refusal.details or {}
    since, until, as_of = details.get("since"), details.get("until"), details.get("as_of")
    oldest = half_message_first_stored(since)
    settles = None if oldest is None else oldest + reconciliation_settle_ms()
    after = f" since {iso_utc(since)}" if since is not None else ""
    if settles is None:
        outlook = f"No half message has been stored{after}: there is no transaction to judge."
    else:
        outlook = (
            f"The oldest transaction not yet judged (half message stored {iso_utc(oldest)}) "
            f"settles at {iso_utc(settles)}; a run once the archive reaches that time judges it."
        )
    now = now_ms()
    run = ReconciliationRun.objects.create(
        state=ReconciliationRun.State.SKIPPED,
        trigger=trigger,
        since_timestamp=since,
        until_timestamp=until,
        as_of_timestamp=as_of,
        started_timestamp=now,
        finished_timestamp=now,
        spark_master=settings.HALFMOON_SPARK_MASTER,
        reason=f"{refusal.message} {outlook}",
        settles_timestamp=settles,
    )
    logger.info("reconciliation run %d skipped: %s", run.pk, run.reason)
    return run


def _job_run(
    run: ReconciliationRun,
    params: ReconcileParams,
    progress: Callable[[ProgressEvent], None] | None,
) -> ReconcileResult:
    """The Spark job of ``run``, under the job group ``halfmoon-reconcile-<id>`` that
    ``progress`` (if any) follows."""
    from broker.pipeline.progress import SparkProgress
    from broker.pipeline.reconcile import reconcile
    from broker.pipeline.spark import spark_session

    spark = spark_session(
        master=settings.HALFMOON_SPARK_MASTER, driver_memory=settings.HALFMOON_SPARK_DRIVER_MEMORY
    )
    group = f"halfmoon-reconcile-{run.pk}"

    def job() -> ReconcileResult:
        return reconcile(
            spark,
            archive_uri=settings.HALFMOON_ARCHIVE_URI,
            output_uri=run.output_uri,
            params=params,
            max_anomalies=conf.reconcile_max_stored_anomalies,
            job_group=group,
        )

    if progress is None:
        return job()
    with SparkProgress(spark.sparkContext, group, progress):
        return job()


def _run_fail(run: ReconciliationRun, exc: BaseException) -> None:
    """Record ``exc`` on ``run`` as FAILED (its last lines of traceback, then the error)."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    trail = "".join(traceback.format_tb(exc.__traceback__, limit=-3))
    ReconciliationRun.objects.filter(pk=run.pk).update(
        state=ReconciliationRun.State.FAILED,
        finished_timestamp=now_ms(),
        error=f"{text}\n\n{trail}".strip(),
    )
    run.refresh_from_db()
    exc.add_note(f"Reconciliation run {run.pk} is FAILED (its error is stored with it).")
    logger.error("reconciliation run %d failed: %s", run.pk, text)


def reconciliation_result_store(run: ReconciliationRun, result: ReconcileResult) -> None:
    """Store ``result`` on ``run`` in one database transaction and mark it SUCCEEDED: the
    counts (``transactions``, ``states``, ``anomaly_counts``: every anomaly), the first
    ``conf.reconcile_max_stored_anomalies`` anomalies in the job's order (kind, then
    transaction id), every analytics row, and the output URI the job wrote to. Storing the
    same run again replaces what was stored (``run`` is updated in place)."""
    anomalies = result.anomalies[: conf.reconcile_max_stored_anomalies]
    with transaction.atomic():
        ReconciliationAnomaly.objects.filter(run=run).delete()
        ReconciliationAnalytics.objects.filter(run=run).delete()
        ReconciliationAnomaly.objects.bulk_create(
            (
                ReconciliationAnomaly(
                    run=run,
                    kind=a.kind,
                    transaction_id=a.transaction_id or "",
                    msg_id=a.msg_id or "",
                    producer_group=a.producer_group or "",
                    topic=a.topic or "",
                    evidence=a.evidence,
                )
                for a in anomalies
            ),
            batch_size=STORE_BATCH,
        )
        ReconciliationAnalytics.objects.bulk_create(
            (
                ReconciliationAnalytics(
                    run=run,
                    producer_group=row.producer_group,
                    topic=row.topic,
                    hour_timestamp=row.hour_ms,
                    transactions=row.transactions,
                    committed=row.committed,
                    rolled_back=row.rolled_back,
                    discarded=row.discarded,
                    pending=row.pending,
                    resolution_p50_ms=row.resolution_p50_ms,
                    resolution_p95_ms=row.resolution_p95_ms,
                    resolution_p99_ms=row.resolution_p99_ms,
                    check_histogram=row.check_histogram,
                    discard_rate=row.discard_rate,
                    unreachable_ms=row.unreachable_ms,
                )
                for row in result.analytics
            ),
            batch_size=STORE_BATCH,
        )
        run.transactions = result.transactions
        run.states = dict(result.states)
        run.anomaly_counts = {k: v for k, v in result.anomaly_counts.items() if v}
        run.anomalies_stored = len(anomalies)
        run.output_uri = result.output_uri or run.output_uri
        run.state = ReconciliationRun.State.SUCCEEDED
        run.finished_timestamp = now_ms()
        run.error = ""
        run.save()


def reconciliation_run_scheduled(*, trigger: str = "beat") -> int | None:
    """The beat task's run (``tasks.pipeline.reconcile``, daily by default) and the
    console's "Run now": a run over what has settled since the last SUCCEEDED run.

    Returns:
        the run's id: SUCCEEDED, or SKIPPED when there is nothing to judge (nothing archived
        yet, or no transaction has settled since the last run; the run says why and when
        the oldest transaction not yet judged settles). None when another run is going on
        (that run is the answer; nothing is recorded). A failing job raises (the run is
        FAILED; the next tick tries the same window again).
    """
    try:
        return reconciliation_run(trigger=trigger).pk
    except ReconciliationSkipped as exc:
        return exc.run.pk
    except Conflict as exc:
        logger.info("reconciliation not run: %s", exc.message)
    return None


def reconciliation_run_queue(*, trigger: str) -> None:
    """Queue a run on the pipeline worker (``tasks.pipeline.reconcile`` with ``trigger``, e.g.
    ``console:<username>``), once the caller's database transaction commits. The worker runs
    it as ``reconciliation_run_scheduled`` does: over what has settled since the last run, or
    records it SKIPPED with the reason when nothing has."""
    transaction.on_commit(
        lambda: current_app.send_task(RECONCILE_TASK, kwargs={"trigger": trigger})
    )

"""Progress of a Spark job group, read from Spark's status tracker (the same figures as the
Spark UI's jobs page), for ``manage.py reconcile``'s progress bar and any other caller of
``broker.services.reconciliation.run.reconciliation_run``.

The tracker's answers are weakly consistent (Spark's own warning): a job's stages may be known
before their details, and details of old stages may be dropped (``spark.ui.retainedStages``).
So a job that has SUCCEEDED counts all its stages' tasks as done (a stage Spark skipped, its
shuffle output reused, never completes a task), and a stage without details counts nothing.
Totals grow as the job group starts new jobs: a bar's total is never known in advance.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from pyspark import SparkContext

SUCCEEDED = "SUCCEEDED"
POLL_INTERVAL_S = 0.5  # a py4j round trip per job and stage: ~1 ms each on one machine


@dataclass(frozen=True)
class ProgressEvent:
    """One reading of a job group's progress: ``jobs_done`` of ``jobs_total`` Spark jobs
    started so far, ``tasks_done`` of ``tasks_total`` tasks of their stages, and ``stage``:
    the name of the latest active stage ("" when none is running)."""

    jobs_done: int
    jobs_total: int
    tasks_done: int
    tasks_total: int
    stage: str


def progress_read(sc: SparkContext, job_group: str) -> ProgressEvent:
    """The progress of ``job_group`` now (``sc.statusTracker()``: getJobIdsForGroup,
    getJobInfo, getStageInfo). Jobs and stages the tracker no longer knows are skipped."""
    tracker = sc.statusTracker()
    jobs_done = jobs_total = tasks_done = tasks_total = 0
    stage_name, stage_latest = "", -1
    seen: set[int] = set()
    for job_id in tracker.getJobIdsForGroup(job_group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        jobs_total += 1
        finished = job.status == SUCCEEDED
        jobs_done += finished
        for stage_id in job.stageIds:
            if stage_id in seen:
                continue
            seen.add(stage_id)
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            tasks_total += stage.numTasks
            tasks_done += (
                stage.numTasks if finished else min(stage.numCompletedTasks, stage.numTasks)
            )
            if not finished and stage.numActiveTasks and stage_id > stage_latest:
                stage_name, stage_latest = stage.name, stage_id
    return ProgressEvent(jobs_done, jobs_total, tasks_done, tasks_total, stage_name)


class SparkProgress(threading.Thread):
    """Calls ``callback(ProgressEvent)`` every ``interval_s`` while ``job_group``'s jobs run,
    whenever the reading changed, and once more at ``stop()`` (so the last call shows the
    final figures). A daemon thread: it never keeps a process alive.

    Use as a context manager around the work that runs the job group::

        with SparkProgress(spark.sparkContext, "reconcile-7", bar_update):
            reconcile(spark, ..., job_group="reconcile-7")

    An exception raised by ``callback`` or the tracker stops the polling (it is kept in
    ``error``), never the job.
    """

    def __init__(
        self,
        sc: SparkContext,
        job_group: str,
        callback: Callable[[ProgressEvent], None],
        *,
        interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        super().__init__(name=f"spark-progress-{job_group}", daemon=True)
        self.sc, self.job_group, self.callback, self.interval_s = (
            sc,
            job_group,
            callback,
            interval_s,
        )
        self.last: ProgressEvent | None = None
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def _report(self) -> None:
        with self._lock:
            reading = progress_read(self.sc, self.job_group)
            if reading != self.last:
                self.last = reading
                self.callback(reading)

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.interval_s):
                self._report()
        except Exception as exc:  # noqa: BLE001 - progress is best effort, the job goes on
            self.error = exc

    def stop(self) -> None:
        """Stop polling, wait for the thread, and report the final reading (if polling did
        not fail)."""
        self._stop_event.set()
        if self.is_alive():
            self.join()
        if self.error is None:
            try:
                self._report()
            except Exception as exc:  # noqa: BLE001
                self.error = exc

    def __enter__(self) -> SparkProgress:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

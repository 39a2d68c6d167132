"""``manage.py reconcile [--since ISO8601|ms] [--until ISO8601|ms]``: run the reconciliation
now (``broker.services.reconciliation.run.reconciliation_run``, trigger ``command``) on
HALFMOON_SPARK_MASTER, with a progress bar fed by Spark's status tracker, then print the run's
summary: transactions by final state, anomalies by kind, where its Parquet output lies.

Exit status: 0 the run succeeded (whether it found anomalies or not); 1 it failed, or could
not start (nothing archived, an empty window, another run going on); 2 a usage error.
"""

from __future__ import annotations

import sys
import traceback
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from broker.errors import HalfmoonError
from broker.models import ReconciliationRun
from broker.pipeline.progress import ProgressEvent
from broker.rules.audit import iso_utc
from broker.rules.durations import duration_text
from broker.services.reconciliation.run import reconciliation_run


def timestamp_ms(text: str) -> int:
    """``text`` as ms since the epoch: an integer is taken as ms, anything else as ISO 8601
    (``2026-11-23``, ``2026-11-23T03:00``, ``...Z``, ``...+01:00``; without a zone: UTC).

    Raises:
        ValueError: neither (argparse reports it as a usage error).
    """
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


timestamp_ms.__name__ = "ISO 8601 time or ms"  # argparse names the type in its error


class ProgressBar:
    """A tqdm bar over the Spark tasks of the run (its total grows as Spark plans new jobs),
    with the jobs done and the running stage beside it; ``update`` is the run's progress
    callback (called from the tracker's thread)."""

    def __init__(self, stream: Any) -> None:
        self.bar = tqdm(total=0, unit="task", file=stream, dynamic_ncols=True, leave=True)

    def update(self, event: ProgressEvent) -> None:
        """Show ``event``: tasks done of the total, jobs done, the current stage's name."""
        self.bar.total = max(event.tasks_total, event.tasks_done)
        self.bar.n = event.tasks_done
        stage = f" {event.stage[:40]}" if event.stage else ""
        self.bar.set_description(f"jobs {event.jobs_done}/{event.jobs_total}{stage}", False)
        self.bar.refresh()

    def close(self) -> None:
        """End the bar (its last state stays on the terminal)."""
        self.bar.close()


class Command(BaseCommand):
    """``manage.py reconcile``: a thin call to ``reconciliation_run`` with a progress bar."""

    help = (
        "Reconcile the archived logs now: every transaction whose half message was stored in "
        "[--since, --until) (defaults: since the last successful run, until what has settled "
        "in the archive). Prints a progress bar, then the run's summary. Exit status 0 when "
        "the run succeeded (anomalies found or not), 1 when it failed or could not start."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--since",
            type=timestamp_ms,
            help="Start of the window of half message times (ISO 8601, UTC unless a zone is "
            "given, or ms). Default: the end of the last successful run's window, or the "
            "start of the archive.",
        )
        parser.add_argument(
            "--until",
            type=timestamp_ms,
            help="End of the window (exclusive; ISO 8601 or ms); at most how far the archive "
            "reaches. Default: the archive's watermark less the time a transaction takes to "
            "settle (check immunity, check max + 1 check intervals, two scan intervals).",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress bar (logs, scripts)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        bar = None if options["no_progress"] else ProgressBar(sys.stderr)
        try:
            run = reconciliation_run(
                since_ms=options["since"],
                until_ms=options["until"],
                trigger="command",
                progress=bar.update if bar else None,
            )
        except HalfmoonError as exc:
            raise CommandError(exc.message, returncode=1) from exc
        except Exception as exc:
            # The error and the service's note naming the FAILED run.
            text = "".join(traceback.format_exception_only(exc)).strip()
            raise CommandError(f"The reconciliation failed: {text}", returncode=1) from exc
        finally:
            if bar is not None:
                bar.close()
        self._summary(run)

    def _summary(self, run: ReconciliationRun) -> None:
        write = self.stdout.write
        duration = (run.finished_timestamp or run.started_timestamp) - run.started_timestamp
        write(
            f"Reconciliation run {run.pk} {run.state} in {duration_text(duration)} on "
            f"{run.spark_master}."
        )
        write(
            f"Window: half messages stored from {iso_utc(run.since_timestamp)} to "
            f"{iso_utc(run.until_timestamp)}, logs as of {iso_utc(run.as_of_timestamp)}."
        )
        write(f"Transactions judged: {run.transactions}")
        for state, count in sorted(run.states.items()):
            write(f"  {state:<12} {count}")
        total = sum(run.anomaly_counts.values())
        write(f"Anomalies: {total}" + (" (none)" if not total else ""))
        for kind, count in sorted(run.anomaly_counts.items()):
            write(f"  {kind:<26} {count}")
        if run.anomalies_stored < total:
            write(f"  ({run.anomalies_stored} kept in the database; all are in the output)")
        write(f"Output: {run.output_uri}")

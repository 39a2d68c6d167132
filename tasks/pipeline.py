"""The data pipeline's tasks, on the ``pipeline`` queue (one worker process keeps the Spark
session: ``deploy/supervisord.conf`` ``pipeline``): the archive export and the reconciliation."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="tasks.pipeline.archive_export", ignore_result=True)
def archive_export() -> int:
    """Archive every closed segment of the logs, then prune (``broker.services.archive``)."""
    from broker.services.archive.export import archive_export_due

    return archive_export_due()


@shared_task(name="tasks.pipeline.reconcile", ignore_result=True)
def reconcile(trigger: str = "beat") -> int | None:
    """Run the reconciliation over what the archive holds since the last run, or record it
    SKIPPED with the reason when nothing has settled (``trigger``: ``beat``,
    ``console:<username>`` for the console's "Run now", ``demo`` for ``manage.py demo
    --reconcile``). Returns the run's id; None when another run was going on."""
    from broker.services.reconciliation.run import reconciliation_run_scheduled

    return reconciliation_run_scheduled(trigger=trigger)

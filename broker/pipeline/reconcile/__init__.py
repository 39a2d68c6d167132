"""The reconciliation job: one row per transaction ("facts") from the archived logs,
the anomalies of ``broker.rules.anomalies.AnomalyKind`` with their evidence, the per-bucket
balance of half messages against final states (the set difference of half and ended msgIds:
the judged transactions not in a final state) and the analytics (``broker.pipeline.analytics``).
The rules are written out in ``docs/reconciliation.md``; ``bench/reconcile_same_work.py`` does
the same work in DuckDB (its outputs compared with the job's, row for row).

More: docs/design.md, "Module notes", broker/pipeline/reconcile/__init__.py."""

from broker.pipeline.reconcile.job import JOB_CONF, OUTPUT_PARTS, output_path, reconcile

__all__ = ["JOB_CONF", "OUTPUT_PARTS", "output_path", "reconcile"]

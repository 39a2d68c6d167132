"""The reconciliation job: one row per transaction ("facts") from the archived logs,
the anomalies of ``broker.rules.anomalies.AnomalyKind`` with their evidence, the per-bucket
balance of half messages against final states (the set difference of half and ended msgIds:
the judged transactions not in a final state) and the analytics (``broker.pipeline.analytics``).
The rules are written out in ``docs/reconciliation.md``; ``bench/reconcile_baseline.py`` does
the same search in DuckDB.

The plan, chosen so that the logs are shuffled once and the driver holds nothing big:

1. Read the four archive tables from ``since - file_reserved_ms`` up to ``as_of``
   (``archive_io.table_read``): a transaction born in the window may have been resumed from an
   older half message, and a delivery in the window may belong to an older half message.
2. Op messages are exploded into Op entries; only the half keys named twice or more survive
   their aggregation, and they are broadcast onto the half messages. Delivery events are
   summed per (msg_id, consumer group, delivered message) first (a hash aggregation).
3. Half and delivered messages (one pass over the commit log), resolutions, the
   check/discard/resume/refused-end journal and the delivery summaries become one tall frame
   keyed by transaction id (= msg_id), repartitioned by it (nearly every key is unique, so a
   map-side partial aggregation would only copy rows) and aggregated once into one array per
   source. Nearly every array holds zero or one element: the facts come from code-generated
   expressions on those (``get``, ``array_max``, ``sort_array``), and the higher-order
   functions (interpreted, per element) run only on rows with journal events or two or more
   elements. No Python UDF.
4. That frame is written once, as ``facts/``; the anomalies, buckets and analytics are computed
   from the Parquet facts (column-pruned reads), and the driver collects only counts, the first
   ``max_anomalies`` anomalies and the analytics rows (a few per producer group, topic, hour).

Its modules, one per stage:

- ``logs``: steps 1-2, the archive's tables read into one tall frame keyed by msg_id, and the
  consumer groups' reach;
- ``facts``: step 3 and the write of step 4, the tall frame aggregated per msg_id into the
  ``FACT_COLUMNS`` of ``facts/``;
- ``anomalies``: every anomaly but bucket_mismatch, from the facts (``ANOMALY_COLUMNS``);
- ``buckets``: the per-bucket balance of ``buckets/`` and its bucket_mismatch anomalies;
- ``job``: ``reconcile``, the public entry: the stages in order, the analytics
  (``broker.pipeline.analytics``) and the ``ReconcileResult`` collected for the broker.
"""

from broker.pipeline.reconcile.job import JOB_CONF, OUTPUT_PARTS, output_path, reconcile

__all__ = ["JOB_CONF", "OUTPUT_PARTS", "output_path", "reconcile"]

"""The data pipeline: the archive of the logs in Parquet (``schema``: its one layout), the Spark
session (``spark``), the reconciliation job (``reconcile``) and its analytics (``analytics``).

Nothing here imports Django models: the job runs the same on ``local[2]``, ``local-cluster``
and a standalone cluster, its executors needing only PySpark. The broker side (exporting from
the database, storing a run's summary) lives in ``broker.services.archive`` and
``broker.services.reconciliation``.
"""

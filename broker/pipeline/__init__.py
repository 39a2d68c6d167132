"""The data pipeline: the archive of the logs in Parquet (``schema``: its one layout), the Spark
session (``spark``), the reconciliation job (``reconcile``) and its analytics (``analytics``).

Nothing here imports Django models: the job runs the same on ``local[2]``, ``local-cluster``
and a standalone cluster, its executors needing only PySpark. The broker side (exporting from
the database, storing a run's summary) lives in ``broker.services.archive`` and
``broker.services.reconciliation.run``.
"""

DRIVER_MEMORY_DEFAULT = "4g"
"""The Spark driver JVM's heap (``HALFMOON_SPARK_DRIVER_MEMORY``'s default). On ``local[*]`` the
driver is also the executor, and Spark's execution memory (60% of the heap past 300 MB, shared
by the running tasks) must hold the reconciliation's aggregation at 10M transactions without
spilling to disk (figures in docs/reconciliation.md, "What it costs")."""

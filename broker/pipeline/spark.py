"""The Spark session of the pipeline, and the few Hadoop FileSystem calls the archive needs
(rename, delete, exists, list) through Spark's own JVM, so ``file:``, ``s3a://`` and
``hdfs://`` archives go through the same code (Spark's connectors).

PySpark runs on Java 17 (``bin/setup`` checks for it). The master is HALFMOON_SPARK_MASTER
(``local[*]`` by default; ``local[2]`` in tests; ``local-cluster[2,1,1024]`` or
``spark://host:7077`` for separate executor processes).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

from broker.pipeline import DRIVER_MEMORY_DEFAULT

_lock = threading.Lock()

# The reconciliation's whole-stage generated methods (``broker.pipeline.reconcile.facts``)
# pass HotSpot's 8,000-byte limit for JIT compilation and would run interpreted: they are
# compiled anyway, with ParallelGC (the throughput collector, for batch work). (The facts' own
# stage runs without whole-stage codegen: see spark.sql.codegen.hugeMethodLimit below.)
_JVM_OPTIONS = "-Dlog4j2.level=WARN -XX:-DontCompileHugeMethods -XX:+UseParallelGC"
# Small shuffles: the broker's segments and test archives are small; the reconciliation raises
# it for its own joins (``broker.pipeline.reconcile``) through adaptive execution.
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.compression.codec": "snappy",
    # Spark's advice for HotSpot: a stage whose generated method passes 8,000 bytes runs
    # without whole-stage codegen (its expressions still generated, in small methods). The
    # facts' derivation (a 12-15 KB method) otherwise falls to the interpreter when C1 gives
    # up on it ("out of virtual registers") and C2 runs out of nodes or deoptimizes it, and its
    # time then depends on what the JIT did (figures in docs/reconciliation.md, "What it costs").
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # A rename is the commit of a segment: Spark's own _SUCCESS, no summary files.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "true",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    "spark.driver.extraJavaOptions": _JVM_OPTIONS,
    "spark.executor.extraJavaOptions": _JVM_OPTIONS,
}


def spark_session(
    *,
    master: str,
    driver_memory: str | None = None,
    app_name: str = "halfmoon",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """The process's Spark session, started on first use (a JVM through py4j; 5-15 s).

    Args:
        master: a Spark master URL (the broker's: ``settings.HALFMOON_SPARK_MASTER``). A session
            already running on another master is stopped and started again on this one.
        driver_memory: the driver JVM's heap (``"4g"``); default the environment's
            ``HALFMOON_SPARK_DRIVER_MEMORY``, else ``DRIVER_MEMORY_DEFAULT``.
        app_name: shown by a cluster's master.
        conf: extra Spark settings (``{"spark.sql.shuffle.partitions": "64"}``).

    Returns:
        the active ``SparkSession``.

    Raises:
        RuntimeError: Java is missing or too old (Spark 4 needs Java 17+): the JVM did not start.
    """
    if driver_memory is None:
        driver_memory = os.environ.get("HALFMOON_SPARK_DRIVER_MEMORY", DRIVER_MEMORY_DEFAULT)
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            if active.sparkContext.master == master:
                for key, value in (conf or {}).items():
                    active.conf.set(key, value)
                return active
            active.stop()
        # Executors run this interpreter, so they import the same PySpark and pyarrow.
        # On one machine Spark binds to loopback (else it warns and picks an outside address).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = SparkSession.builder.master(master).appName(app_name)
        builder = builder.config("spark.driver.memory", driver_memory)
        for key, value in {**_DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except Exception as exc:  # py4j's "Java gateway process exited" and friends
            raise RuntimeError(
                f"Spark did not start ({exc}). PySpark 4 needs Java 17 or newer on PATH or in "
                "JAVA_HOME (Debian: apt-get install -y openjdk-17-jre-headless)."
            ) from exc
        session.sparkContext.setLogLevel("WARN")
        return session


def spark_stop() -> None:
    """Stop the process's Spark session, if any (its JVM stays for the next session)."""
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()


class HadoopFiles:
    """Hadoop FileSystem calls on paths of any scheme Spark can reach, through the session's
    JVM: ``exists``, ``delete`` (recursive), ``rename`` (atomic on HDFS and local files; on S3
    a copy of each file, in no set order: readers read only below the archive's watermark),
    ``mkdirs``, ``touch``, ``list_dirs``, ``list_files``, ``write_text`` and ``read_text``."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, path: str) -> Any:
        return self._path(path).getFileSystem(self._conf)

    def exists(self, path: str) -> bool:
        """Whether ``path`` (file or directory) exists."""
        return bool(self._fs(path).exists(self._path(path)))

    def delete(self, path: str) -> bool:
        """Delete ``path`` and everything under it; False when it did not exist."""
        return bool(self._fs(path).delete(self._path(path), True))

    def mkdirs(self, path: str) -> None:
        """Create ``path`` and its parents."""
        self._fs(path).mkdirs(self._path(path))

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (whose parent is created first).

        Raises:
            OSError: the file system refused (target exists, source missing).
        """
        fs = self._fs(source)
        self.mkdirs(self._path(target).getParent().toString())
        if not fs.rename(self._path(source), self._path(target)):
            raise OSError(f"rename {source} -> {target} refused")

    def touch(self, path: str) -> None:
        """Create an empty file at ``path`` (e.g. a ``_SUCCESS`` marker), replacing any."""
        self._fs(path).create(self._path(path), True).close()

    def list_dirs(self, path: str) -> list[str]:
        """The full paths of the directories directly under ``path`` ([] when it is missing)."""
        if not self.exists(path):
            return []
        return [
            status.getPath().toString()
            for status in self._fs(path).listStatus(self._path(path))
            if status.isDirectory()
        ]

    def list_files(self, path: str) -> list[str]:
        """The full paths of the files directly under ``path`` ([] when it is missing)."""
        if not self.exists(path):
            return []
        return [
            status.getPath().toString()
            for status in self._fs(path).listStatus(self._path(path))
            if status.isFile()
        ]

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` (UTF-8) as the file ``path``, replacing any (on S3 the object appears
        whole when the stream closes)."""
        stream = self._fs(path).create(self._path(path), True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()

    def read_text(self, path: str) -> str:
        """The file ``path`` as UTF-8 text.

        Raises:
            Py4JJavaError: it does not exist or cannot be read.
        """
        stream = self._fs(path).open(self._path(path))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


@contextmanager
def job_group(spark: SparkSession, group: str, description: str) -> Iterator[None]:
    """Run the block's Spark jobs under ``group`` (so a status tracker can follow them)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Run the block with the session's SQL settings ``conf`` (``{"spark.sql.shuffle.partitions":
    "16"}``), then put back what the session had: a setting it had is restored, one it had not
    is unset again (a long-lived worker's session keeps nothing of one job)."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

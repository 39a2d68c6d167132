"""The reconciliation runs unchanged on a Spark standalone cluster: a master and two workers
started from the pyspark package's own launcher (``bin/spark-cluster``), the job submitted from
a separate driver process with HALFMOON_SPARK_MASTER set to the cluster, its tasks run by
executor processes of the workers. The result equals the same job's on ``local[2]``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from broker.pipeline.reconcile import reconcile
from broker.rules.anomalies import ReconcileParams
from tests.e2e.processes import ROOT, spark_standalone_cluster
from tests.pipeline.archive_builder import ArchiveBuilder

pytestmark = pytest.mark.e2e

T0 = 1_790_000_000_000  # 2026-09-21, an hour boundary
PARAMS = ReconcileParams(
    since_ms=T0,
    until_ms=T0 + 3_600_000,
    as_of_ms=T0 + 3 * 3_600_000,
    transaction_check_max=3,
    transaction_check_interval_ms=10_000,
    transaction_timeout_ms=5_000,
    file_reserved_ms=72 * 3_600_000,
    visibility_sla_ms=1_000,
    check_scan_interval_ms=1_000,
)

# The driver of the cluster run: the same call, another process, the cluster's master.
DRIVER = """
import json, sys
from dataclasses import asdict
from broker.pipeline.reconcile import reconcile
from broker.pipeline.spark import spark_session
from broker.rules.anomalies import ReconcileParams

master, archive, output, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
spark = spark_session(master=master)
result = reconcile(spark, archive_uri=archive, output_uri=output,
                   params=ReconcileParams(**params), max_anomalies=1000)
# Block managers: the driver's and one per executor.
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(json.dumps({"result": asdict(result), "executors": executors}))
"""


def _archive(spark, uri: str) -> None:
    """Clean transactions of every kind over two producer groups and several hours, consumed by
    two groups, with a few anomalies planted, so the comparison covers joins, the bucket
    anti-join and the analytics."""
    b = ArchiveBuilder(start_ms=T0)
    for i in range(60):
        at = T0 + i * 50_000
        group = "G1" if i % 2 else "G2"
        tx = b.transaction(f"tx-{i}", at=at, producer_group=group, topic=f"T{i % 3}")
        if i % 4 == 0:
            tx.commit(at=at + 100 + i)
        elif i % 4 == 1:
            tx.rollback(at=at + 200, by="check")
        elif i % 4 == 2:
            for c in range(3):
                tx.check(at=at + 10_000 * (c + 1))
            tx.discard(at=at + 45_000)
        else:
            tx.check(at=at + 10_000, outcome="COMMIT_MESSAGE").commit(at=at + 10_050, by="check")
    b.transaction("lost", at=T0 + 5_000).commit(at=T0 + 5_100, deliver=False)
    b.transaction("slow", at=T0 + 6_000).commit(at=T0 + 6_100, visible_after_ms=5_000)
    b.transaction("stuck", at=T0 + 7_000).check_undelivered(at=T0 + 12_000)
    b.orphan_delivery("orphan", at=T0 + 8_000, topic="T0")
    b.consume_all("C1", delay_ms=100)
    b.consume_all("C2", delay_ms=300)
    b.write(spark, uri)


def test_the_job_gives_the_same_result_on_a_standalone_cluster_as_on_local_2(spark, tmp_path):
    archive = str(tmp_path / "archive")
    _archive(spark, archive)
    local = reconcile(
        spark,
        archive_uri=archive,
        output_uri=str(tmp_path / "out-local"),
        params=PARAMS,
        max_anomalies=1000,
    )
    assert spark.sparkContext.master == "local[2]"
    assert set(local.anomaly_counts) == {
        "lost_commit",
        "slow_visibility",
        "orphan_delivery",
        "bucket_mismatch",
    }

    with spark_standalone_cluster(tmp_path / "spark") as master:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                DRIVER,
                master,
                archive,
                str(tmp_path / "out-cluster"),
                json.dumps(asdict(PARAMS)),
            ],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "halfmoon.settings_test"},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    cluster = json.loads(done.stdout.strip().splitlines()[-1])

    assert cluster["executors"] == 2  # the two workers' executor processes, not the driver
    expected = json.loads(json.dumps(asdict(local)))
    expected["output_uri"] = str(tmp_path / "out-cluster")  # each run writes where it was told
    assert cluster["result"] == expected
    facts_local = spark.read.parquet(str(tmp_path / "out-local" / "facts"))
    facts_cluster = spark.read.parquet(str(Path(tmp_path / "out-cluster") / "facts"))
    assert facts_local.count() == facts_cluster.count() > 60
    assert facts_local.exceptAll(facts_cluster).count() == 0
    assert facts_cluster.exceptAll(facts_local).count() == 0

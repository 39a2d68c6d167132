"""Reconciliation runs for the service, API and console tests, stored through the service
(``reconciliation_result_store``) from ``ReconcileResult`` values built here, so tests that
are not about Spark do not start it. ``tests/services/test_reconciliation.py`` stores a real
job's result too.

- ``anomaly(kind, transaction_id, **evidence)``: one ``Anomaly``.
- ``analytics_row(group, topic, hour_ms, **counts)``: one ``AnalyticsRow``.
- ``stored_run(anomalies=..., analytics=..., ...)``: a SUCCEEDED run holding them.
- ``archived(until_ms, segment_starts=...)``: the archive's watermark and segment rows, as
  the archive export leaves them.
- ``fake_job_install(monkeypatch, settings, tmp_path)``: a ``FakeJob`` standing in for the
  Spark job, for tests of the service's and the command's own logic.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import broker.pipeline.reconcile as reconcile_module
import broker.pipeline.spark as spark_module
from broker.models import ArchiveSegment, ArchiveWatermark, ReconciliationRun
from broker.pipeline.result import AnalyticsRow, Anomaly, ReconcileResult
from broker.selectors.reconciliation import reconciliation_params
from broker.services.reconciliation.run import reconciliation_result_store

HOUR = 3_600_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % HOUR  # an hour's start (ms)


def anomaly(
    kind: str,
    transaction_id: str = "",
    *,
    msg_id: str | None = None,
    producer_group: str = "G",
    topic: str = "TranTest",
    **evidence: Any,
) -> Anomaly:
    """An anomaly of ``kind`` naming ``transaction_id`` (its msg_id too unless given)."""
    return Anomaly(
        kind=kind,
        transaction_id=transaction_id,
        msg_id=transaction_id if msg_id is None else msg_id,
        producer_group=producer_group,
        topic=topic,
        evidence=evidence,
    )


def analytics_row(
    group: str,
    topic: str,
    hour_ms: int,
    *,
    committed: int = 0,
    rolled_back: int = 0,
    discarded: int = 0,
    pending: int = 0,
    p50: int | None = None,
    p95: int | None = None,
    p99: int | None = None,
    unreachable_ms: int = 0,
) -> AnalyticsRow:
    """One analytics row; ``transactions`` is the sum of the states, ``discard_rate`` follows."""
    total = committed + rolled_back + discarded + pending
    return AnalyticsRow(
        producer_group=group,
        topic=topic,
        hour_ms=hour_ms,
        transactions=total,
        committed=committed,
        rolled_back=rolled_back,
        discarded=discarded,
        pending=pending,
        resolution_p50_ms=p50,
        resolution_p95_ms=p95,
        resolution_p99_ms=p99,
        check_histogram={"0": total},
        discard_rate=discarded / total if total else 0.0,
        unreachable_ms=unreachable_ms,
    )


def stored_run(
    *,
    anomalies: list[Anomaly] | None = None,
    analytics: list[AnalyticsRow] | None = None,
    since: int = T0,
    until: int = T0 + 2 * HOUR,
    as_of: int = T0 + 3 * HOUR,
    trigger: str = "command",
    states: dict[str, int] | None = None,
    anomaly_counts: dict[str, int] | None = None,
) -> ReconciliationRun:
    """A SUCCEEDED run over ``[since, until)`` holding ``anomalies`` (counted by kind unless
    ``anomaly_counts`` is given) and ``analytics``."""
    anomalies = anomalies or []
    params = reconciliation_params(since_ms=since, until_ms=until, as_of_ms=as_of)
    run = ReconciliationRun.objects.create(
        trigger=trigger,
        since_timestamp=since,
        until_timestamp=until,
        as_of_timestamp=as_of,
        spark_master="local[2]",
        output_uri="/tmp/archive/reconciliation/run=0",
        params=dataclasses.asdict(params),
    )
    result = ReconcileResult(
        params=params,
        transactions=sum((states or {"COMMITTED": 10}).values()),
        states=states or {"COMMITTED": 10},
        anomaly_counts=anomaly_counts or dict(Counter(a.kind for a in anomalies)),
        anomalies=anomalies,
        analytics=analytics or [],
        output_uri=f"/tmp/archive/reconciliation/run={run.pk}",
    )
    reconciliation_result_store(run, result)
    return run


def archived(until_ms: int, *, segment_starts: tuple[int, ...] = (T0,)) -> None:
    """The archive as the export leaves it: segment rows and the ``logs`` watermark."""
    for start in segment_starts:
        ArchiveSegment.objects.create(
            start_timestamp=start, end_timestamp=start + 600_000, uri="/tmp/archive"
        )
    ArchiveWatermark.objects.update_or_create(
        name="logs", defaults={"archived_until_timestamp": until_ms}
    )


class FakeJob:
    """Stands in for the Spark job (``broker.pipeline.reconcile.reconcile``) in the tests of
    the service's own logic: records each call's keyword arguments in ``calls`` and raises
    ``error`` if set, else returns a small fixed result (3 transactions, one lost_commit
    ``TX1``, one analytics row) written to the ``output_uri`` it was given."""

    def __init__(self, *, error: Exception | None = None) -> None:
        self.calls: list[dict] = []
        self.error = error

    def __call__(self, spark, **kwargs) -> ReconcileResult:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return ReconcileResult(
            params=kwargs["params"],
            transactions=3,
            states={"COMMITTED": 2, "ROLLED_BACK": 1},
            anomaly_counts={"lost_commit": 1},
            anomalies=[anomaly("lost_commit", "TX1", resolved_timestamp=T0)],
            analytics=[analytics_row("G", "TranTest", T0, committed=2, rolled_back=1)],
            output_uri=kwargs["output_uri"],
        )


def fake_job_install(monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Path) -> FakeJob:
    """Make the service run a new ``FakeJob`` instead of Spark (no session is started), with a
    fresh tmp path as the archive URI (a test module's ``fake_job`` fixture calls this)."""
    settings.HALFMOON_ARCHIVE_URI = str(tmp_path / "archive")
    job = FakeJob()
    monkeypatch.setattr(reconcile_module, "reconcile", job)
    monkeypatch.setattr(spark_module, "spark_session", lambda **kw: object())
    return job

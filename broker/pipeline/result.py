"""What the reconciliation job hands back to the broker (``broker.pipeline.reconcile``), as
plain values: ``broker.services.reconciliation.run`` stores them; the full output stays in Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.rules.anomalies import ReconcileParams


@dataclass(frozen=True)
class Anomaly:
    """One anomaly: its ``kind`` (``AnomalyKind``), the transaction (or, for a delivery
    without a half message, only the ``msg_id``) and its ``evidence`` (JSON-ready: timestamps
    in ms, commit log offsets, counts)."""

    kind: str
    transaction_id: str
    msg_id: str
    producer_group: str
    topic: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class AnalyticsRow:
    """Per producer group, topic and hour of half message time (``hour_ms``, UTC): counts by
    final state, resolution latency percentiles (ms from half stored to end; None when nothing
    was resolved), check-count histogram (``{"0": n, "1": n}``), discard rate (discarded /
    transactions) and the producer group's time unreachable in that hour (ms)."""

    producer_group: str
    topic: str
    hour_ms: int
    transactions: int
    committed: int
    rolled_back: int
    discarded: int
    pending: int
    resolution_p50_ms: int | None
    resolution_p95_ms: int | None
    resolution_p99_ms: int | None
    check_histogram: dict[str, int]
    discard_rate: float
    unreachable_ms: int


@dataclass
class ReconcileResult:
    """A finished run: ``transactions`` judged, ``states`` (final state -> count),
    ``anomaly_counts`` (kind -> count, every anomaly), ``anomalies`` (at most the
    ``max_anomalies`` asked for, ordered by kind then transaction id), ``analytics`` and the
    Parquet ``output_uri`` (``facts``, ``anomalies``, ``buckets``, ``analytics`` under it)."""

    params: ReconcileParams
    transactions: int
    states: dict[str, int]
    anomaly_counts: dict[str, int]
    anomalies: list[Anomaly] = field(default_factory=list)
    analytics: list[AnalyticsRow] = field(default_factory=list)
    output_uri: str = ""

"""Serializers of reconciliation runs and their anomalies."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from broker.api.serializers.fields import QueryIntegerField, StrictChoiceField
from broker.models import (
    ReconciliationRun,
)
from broker.rules.anomalies import AnomalyKind

ANOMALY_PAGE_DEFAULT = 1000
ANOMALY_PAGE_MAX = 10000
# A larger OFFSET overflows the database's bigint; no run stores anywhere near this many.
ANOMALY_OFFSET_MAX = 2**31 - 1


class ReconciliationRunQuerySerializer(serializers.Serializer):
    """Which of a run's stored anomalies to include: ``kind`` (one ``AnomalyKind``), paged by
    ``limit`` and ``offset`` in the job's order (kind, then transaction id)."""

    kind = StrictChoiceField(choices=AnomalyKind.choices, required=False)
    limit = QueryIntegerField(min_value=1, max_value=ANOMALY_PAGE_MAX, default=ANOMALY_PAGE_DEFAULT)
    offset = QueryIntegerField(min_value=0, max_value=ANOMALY_OFFSET_MAX, default=0)


class ReconciliationAnomalyOutSerializer(serializers.Serializer):
    """One anomaly: its kind, the transaction (``transaction_id``; "" for a delivery with no
    half message, named by ``msg_id`` alone, and for a bucket's mismatch), and its evidence
    (timestamps in ms, commit log offsets, counts; fields per kind in docs/reconciliation.md)."""

    kind = serializers.ChoiceField(choices=AnomalyKind.choices)
    transaction_id = serializers.CharField(allow_blank=True)
    msg_id = serializers.CharField(allow_blank=True)
    producer_group = serializers.CharField(allow_blank=True)
    topic = serializers.CharField(allow_blank=True)
    evidence = serializers.DictField()


class ReconciliationRunOutSerializer(serializers.Serializer):
    """A reconciliation run (``ReconciliationRun``): the window of half message store times it
    judged (``since``, ``until``, ms) as of the archive's watermark (``as_of``; all three null
    on a run skipped with nothing archived), its counts, one page of its stored anomalies
    (``anomalies_matching``: how many stored ones match ``kind``), and for a skipped run why
    (``reason``) and when the oldest transaction not yet judged settles
    (``settles_timestamp``). Read from the run's attributes, ``anomalies_matching`` and
    ``anomalies_page`` set by the view."""

    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=ReconciliationRun.State.choices)
    trigger = serializers.CharField(help_text="command, beat, demo, or console:<username>")
    since = serializers.IntegerField(source="since_timestamp", allow_null=True)
    until = serializers.IntegerField(source="until_timestamp", allow_null=True)
    as_of = serializers.IntegerField(source="as_of_timestamp", allow_null=True)
    started_timestamp = serializers.IntegerField()
    finished_timestamp = serializers.IntegerField(allow_null=True)
    spark_master = serializers.CharField()
    output_uri = serializers.CharField(
        allow_blank=True, help_text="The run's Parquet output: facts, anomalies, buckets, analytics"
    )
    transactions = serializers.IntegerField(help_text="Transactions judged")
    states = serializers.DictField(
        child=serializers.IntegerField(), help_text="Transactions by final state"
    )
    anomaly_counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Anomalies by kind, all of them"
    )
    anomalies_stored = serializers.IntegerField(help_text="Anomalies kept in the database")
    anomalies_matching = serializers.IntegerField(help_text="Stored anomalies matching kind")
    anomalies = ReconciliationAnomalyOutSerializer(many=True, source="anomalies_page")
    error = serializers.CharField(allow_blank=True, help_text="Why a failed run failed")
    reason = serializers.CharField(allow_blank=True, help_text="Why a skipped run did not run")
    settles_timestamp = serializers.IntegerField(
        allow_null=True,
        help_text="Skipped: when the oldest transaction not yet judged settles (ms); null when "
        "none waits, and on other runs",
    )


@extend_schema_field({"$ref": "#/components/schemas/ReconciliationRunOutStateEnum"})
class _RunStateField(serializers.ChoiceField):
    """A run's state, documented as the enum ``ReconciliationRunOut`` already names (one
    choice set under two components would otherwise get a name made of its hash)."""


class ReconciliationRunSummaryOutSerializer(ReconciliationRunOutSerializer):
    """A run of ``GET /api/v1/reconciliation/runs``: ``ReconciliationRunOutSerializer``
    without the anomalies page."""

    state = _RunStateField(choices=ReconciliationRun.State.choices)
    anomalies_matching = None
    anomalies = None


RUNS_PAGE_DEFAULT = 20
RUNS_PAGE_MAX = 100
RUN_ID_MAX = 2**63 - 1  # the database's bigint: a larger ``before`` is a 400, never a 500


class ReconciliationRunsQuerySerializer(serializers.Serializer):
    """A page of runs, newest first: ``limit`` runs with an id below ``before`` (keyset)."""

    limit = QueryIntegerField(min_value=1, max_value=RUNS_PAGE_MAX, default=RUNS_PAGE_DEFAULT)
    before = QueryIntegerField(min_value=1, max_value=RUN_ID_MAX, required=False)


class ReconciliationRunsOutSerializer(serializers.Serializer):
    """``GET /api/v1/reconciliation/runs``: runs newest first, whatever their state (the first
    is the latest decision: a run, or a skip saying why), and ``next_before``, the ``before``
    of the next (older) page, null on the last."""

    runs = ReconciliationRunSummaryOutSerializer(many=True)
    next_before = serializers.IntegerField(allow_null=True)


class ReconciliationRunQueuedOutSerializer(serializers.Serializer):
    """A run queued on the pipeline worker: ``{"queued": true, "trigger": "operator:<key>"}``."""

    queued = serializers.BooleanField()
    trigger = serializers.CharField(help_text="The run's trigger: operator:<access key name>")

"""api-v1 reconciliation runs (admin key): the runs newest first, the latest successful run, a
run by id, and a run queued now (the console's "Run now")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import IsAdminKey, operator_actor
from broker.api.serializers.reconciliation import (
    ReconciliationRunOutSerializer,
    ReconciliationRunQuerySerializer,
    ReconciliationRunQueuedOutSerializer,
    ReconciliationRunsOutSerializer,
    ReconciliationRunsQuerySerializer,
)
from broker.api.shapes import validated
from broker.api.views.base import error_responses
from broker.selectors.reconciliation import (
    reconciliation_anomalies,
    reconciliation_run_get,
    reconciliation_run_latest,
    reconciliation_runs_page,
)
from broker.services.reconciliation.run import reconciliation_run_queue


class _ReconciliationRunView(APIView):
    """One reconciliation run as ``ReconciliationRunOutSerializer``, with the page of its stored
    anomalies the query asks for (``kind``, ``limit``, ``offset``)."""

    permission_classes = [IsAdminKey]

    @staticmethod
    def answer(request: Request, run_fetch: Callable[[], Any]) -> Response:
        """Validate the query (400 ``invalid_input``), then fetch the run with ``run_fetch``
        (which raises the 404) and answer it with the page of anomalies asked for."""
        query = validated(ReconciliationRunQuerySerializer, request.query_params)
        run = run_fetch()
        anomalies = reconciliation_anomalies(run, kind=query.get("kind"))
        run.anomalies_matching = anomalies.count()
        run.anomalies_page = list(anomalies[query["offset"] : query["offset"] + query["limit"]])
        return Response(ReconciliationRunOutSerializer(run).data)


_RUN_DESCRIPTION = (
    "The window of half message store times the run judged (`since`..`until`, ms) as of the "
    "archive's watermark (`as_of`), transactions by final state, anomalies by kind (all of "
    "them) and the stored anomalies (at most HALFMOON_RECONCILE_MAX_STORED_ANOMALIES; all are "
    "in the Parquet output at `output_uri`), filtered by `kind` and paged with `limit` "
    "(default 1000, at most 10000) and `offset`; `anomalies_matching` counts the stored ones "
    "that match `kind`. Admin key."
)


def _run_schema(summary: str, note: str) -> Callable[[Any], Any]:
    """The OpenAPI operation of a run endpoint: its query, answer and errors, and
    ``_RUN_DESCRIPTION`` followed by ``note``."""
    return extend_schema(
        parameters=[ReconciliationRunQuerySerializer],
        responses={200: ReconciliationRunOutSerializer, **error_responses(404)},
        summary=summary,
        description=f"{_RUN_DESCRIPTION} {note}",
    )


class ReconciliationRunLatestView(_ReconciliationRunView):
    """``GET /api/v1/reconciliation/runs/latest``: the latest SUCCEEDED run."""

    @_run_schema(
        "The latest successful reconciliation run (admin key)",
        "The latest run that SUCCEEDED (a running or failed run has no report); 404 "
        "`reconciliation_run_not_found` before the first.",
    )
    def get(self, request: Request) -> Response:
        return self.answer(request, reconciliation_run_latest)


class ReconciliationRunListView(APIView):
    """``GET /api/v1/reconciliation/runs``: the runs, newest first, whatever their state."""

    permission_classes = [IsAdminKey]

    @extend_schema(
        parameters=[ReconciliationRunsQuerySerializer],
        responses={200: ReconciliationRunsOutSerializer, **error_responses()},
        operation_id="v1_reconciliation_runs_list",
        summary="Reconciliation runs, newest first (admin key)",
        description="Every run whatever its state, without anomalies: the first is the latest "
        "decision, a run or a `skipped` one that says why (`reason`) and when the oldest "
        "transaction not yet judged settles (`settles_timestamp`). `limit` runs (default 20, "
        "at most 100) with an id below `before`; `next_before` pages on, null on the last "
        "page. Admin key.",
    )
    def get(self, request: Request) -> Response:
        query = validated(ReconciliationRunsQuerySerializer, request.query_params)
        page = reconciliation_runs_page(before=query.get("before"), per_page=query["limit"])
        body = {"runs": page.runs, "next_before": page.next_before}
        return Response(ReconciliationRunsOutSerializer(body).data)

    @extend_schema(
        request=None,
        responses={202: ReconciliationRunQueuedOutSerializer, **error_responses()},
        summary="Run the reconciliation now (admin key; addition to api-v1)",
        description='The console\'s "Run now": a run is queued on the pipeline worker with '
        "`trigger` `operator:<key name>`, over what has settled since the last run (or "
        "recorded `skipped`, saying why, when nothing has). It appears in "
        "`GET /api/v1/reconciliation/runs` as it starts. Admin key.",
    )
    def post(self, request: Request) -> Response:
        trigger = operator_actor(request)
        reconciliation_run_queue(trigger=trigger)
        return Response({"queued": True, "trigger": trigger}, status=status.HTTP_202_ACCEPTED)


class ReconciliationRunDetailView(_ReconciliationRunView):
    """``GET /api/v1/reconciliation/runs/{id}``: one run, whatever its state."""

    @_run_schema(
        "One reconciliation run, whatever its state (admin key)",
        "A `running` run has no counts yet, a `failed` one says why in `error`, a `skipped` "
        "one (not run: nothing archived or settled yet) in `reason`; 404 "
        "`reconciliation_run_not_found` for an unknown id.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        return self.answer(request, lambda: reconciliation_run_get(run_id))

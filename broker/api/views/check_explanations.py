"""api-v1 additions: why a transaction's or a producer group's next back-check happens when it
does (``broker.selectors.check_explanations``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.permissions import require_producer
from broker.api.serializers.check_explanations import (
    ProducerGroupCheckExplanationOutSerializer,
    TransactionCheckExplanationOutSerializer,
    explanation_data,
)
from broker.api.views.base import error_responses
from broker.api.views.transactions import _transaction_readable
from broker.selectors.check_explanations import (
    check_explanation_of_producer_group,
    check_explanation_of_transaction,
)

_DESCRIPTION = (
    "The predicted time of the next check (ms; null: none), what it waits for (the "
    "transaction timeout or check immunity, the check interval after the last check, the backoff "
    "of undelivered checks, the group's backoff, the group's caps), what happens then (a check, "
    "or a discard by the check max or the file reserved time), warnings where the settings "
    "contradict each other or the group is down, and each value in effect with its source "
    "(`default`, `setting`, `message property`)."
)


class TransactionCheckExplanationView(APIView):
    @extend_schema(
        responses={200: TransactionCheckExplanationOutSerializer, **error_responses(404)},
        summary="Why a transaction's next check happens when it does (addition to api-v1)",
        description=_DESCRIPTION + " Readable by the keys that may read the transaction.",
    )
    def get(self, request: Request, transaction_id: str) -> Response:
        tx = _transaction_readable(request, transaction_id)
        got = check_explanation_of_transaction(tx.transaction_id)
        out = {
            "transaction_id": got.transaction_id,
            "producer_group": got.producer_group,
            "state": got.state,
            **explanation_data(got.explanation, now=got.now),
        }
        return Response(TransactionCheckExplanationOutSerializer(out).data)


class ProducerGroupCheckExplanationView(APIView):
    @extend_schema(
        responses={200: ProducerGroupCheckExplanationOutSerializer, **error_responses(404)},
        summary="Why a producer group's next check happens when it does (addition to api-v1)",
        description=_DESCRIPTION + " The group's next check is that of its pending transaction "
        "due first (`next_transaction_id`). Readable by an admin key and the group's keys.",
    )
    def get(self, request: Request, name: str) -> Response:
        require_producer(request, name)
        got = check_explanation_of_producer_group(name)
        out = {
            "producer_group": got.producer_group,
            "pending": got.pending,
            "next_transaction_id": got.next_transaction_id,
            **explanation_data(got.explanation, now=got.now),
        }
        return Response(ProducerGroupCheckExplanationOutSerializer(out).data)

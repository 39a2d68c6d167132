"""api-v1 "Batches": ``POST /transactions/batch``, ``/transactions/end-batch`` and
``/messages/batch``.

Each view validates the envelope (400, and ``batch_size_check``: 400 ``batch_empty`` or
``batch_too_large``, nothing stored; 413 above the body limit, ``LimitedJSONParser``), then
each item as the single endpoint does (its serializer, then its permission check), calls one
service of ``broker.services.commitlog.batch`` (set-based: one statement for the batch) and answers 200
``{"results": [...]}``: per item ``{"status": 201|200, "body": {...}}`` with the single
endpoint's status and body, or ``{"status": 4xx, "error": {...}}`` with the single endpoint's
error status and error object (``broker.api.exceptions``), for that item alone.

Rights mirror the single endpoints: a half message or an end needs the right for its item's
producer group (a key without it gets a 403 item, no "any producer" check first, as
``POST /transactions``); a normal message batch needs an admin key or a key with a producer
group for the whole request (403, as ``POST /messages``), then each item's producer group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from broker.api.exceptions import exception_handler
from broker.api.permissions import require_any_producer, require_producer, sender_group
from broker.api.serializers.batch import (
    BatchInSerializer,
    MessageBatchInSerializer,
    MessageBatchOutSerializer,
    TransactionBatchInSerializer,
    TransactionBatchOutSerializer,
    TransactionEndBatchInSerializer,
    TransactionEndBatchItemInSerializer,
    TransactionEndBatchOutSerializer,
)
from broker.api.serializers.errors import ErrorDetailOutSerializer
from broker.api.serializers.messages import MessageSendInSerializer
from broker.api.serializers.transactions import (
    TransactionEndOutSerializer,
    TransactionPrepareInSerializer,
    TransactionPrepareOutSerializer,
)
from broker.api.shapes import represented, validated
from broker.api.views.base import error_responses
from broker.api.views.messages import send_result_body
from broker.conf import conf
from broker.errors import HalfmoonError
from broker.services.commitlog import batch

# --- OpenAPI shapes of the batch serializers ---------------------------------------------------


class BatchInSchema(OpenApiSerializerExtension):
    """A batch request: ``{<list_field>: [...]}`` with 1..``HALFMOON_BATCH_MAX_MESSAGES`` items,
    each documented as the single operation's body (its component) but accepted whatever it is:
    an item that is not valid is answered in its own result (400), not refused with the batch."""

    target_class = "broker.api.serializers.batch.BatchInSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """``{"type": "object", "required": [list_field], "properties": {list_field: array}}``;
        the array's ``items`` is ``anyOf`` [the item component, any value]."""
        target = self.target if isinstance(self.target, type) else type(self.target)
        item = auto_schema.resolve_serializer(target.item_serializer, direction).ref
        return {
            "type": "object",
            "properties": {
                target.list_field: {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": conf.batch_max_messages,
                    "items": {"anyOf": [item, {}]},
                    "description": "Each item is the single operation's body; an item that is "
                    "not valid gets its own 400 result.",
                }
            },
            "required": [target.list_field],
        }


class BatchOutSchema(OpenApiSerializerExtension):
    """A batch answer: ``{"results": [...]}``, each ``oneOf`` a success item (``status`` one of
    ``ok_statuses``, ``body`` the single answer's component) or an error item (``status``
    400-499, ``error`` the contract's error object)."""

    target_class = "broker.api.serializers.batch.BatchOutSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """The ``results`` array of ``oneOf`` [success item, error item]."""
        target = self.target if isinstance(self.target, type) else type(self.target)
        body = auto_schema.resolve_serializer(target.item_serializer, direction).ref
        error = auto_schema.resolve_serializer(ErrorDetailOutSerializer, direction).ref
        ok = {
            "type": "object",
            "properties": {
                "status": {"type": "integer", "enum": list(target.ok_statuses)},
                "body": body,
            },
            "required": ["status", "body"],
        }
        failed = {
            "type": "object",
            "properties": {
                "status": {"type": "integer", "minimum": 400, "maximum": 499},
                "error": error,
            },
            "required": ["status", "error"],
        }
        return {
            "type": "object",
            "properties": {"results": {"type": "array", "items": {"oneOf": [ok, failed]}}},
            "required": ["results"],
        }


# --- Item handling -----------------------------------------------------------------------------


def _items(request: Request, envelope: type[BatchInSerializer]) -> list[Any]:
    """The items of the batch as sent, after the envelope and ``batch_size_check``.

    Raises:
        ValidationError (400): the envelope is not ``{list_field: [...]}``.
        InvalidInput (400): ``batch_empty``, ``batch_too_large``.
    """
    items = validated(envelope, request.data)[envelope.list_field]
    batch.batch_size_check(len(items))
    return items


def _items_valid(
    items: list[Any],
    serializer_class: type[serializers.Serializer],
    check: Callable[[dict], None],
) -> list[batch.BatchItem]:
    """Each item's service arguments: ``serializer_class``'s validated data (``validated``, as
    the single endpoint validates its body), after ``check(data)`` (the permission checks of
    the single endpoint, which may change the data); or the error of that item (a
    ValidationError, a HalfmoonError)."""
    valid: list[batch.BatchItem] = []
    for item in items:
        try:
            data = validated(serializer_class, item)
            check(data)
        except (ValidationError, HalfmoonError) as exc:
            valid.append(exc)
            continue
        valid.append(data)
    return valid


def _results(
    outcomes: list[Any], ok: Callable[[Any], tuple[int, dict[str, Any]]]
) -> dict[str, Any]:
    """``{"results": [...]}``: ``ok(outcome)`` as ``{"status", "body"}`` for a success; for an
    error, its status and error object as the single endpoint answers them
    (``exception_handler``)."""
    results = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            response = exception_handler(outcome, {})
            if response is None:  # not an error the API renders: let it fail the request
                raise outcome
            results.append({"status": response.status_code, **response.data})
        else:
            code, body = ok(outcome)
            results.append({"status": code, "body": body})
    return {"results": results}


_DESCRIPTION = (
    "Written by one statement for the whole batch; at most HALFMOON_BATCH_MAX_MESSAGES items "
    "(default 128; more is 400 `batch_too_large`, none 400 `batch_empty`, nothing stored) and "
    "at most the request body limit (413 `request_too_large`, nothing stored). 200 "
    '`{"results": [...]}`, one per item in order: `{"status", "body"}` with the single '
    'endpoint\'s status and body, or `{"status": 4xx, "error": {...}}` with the single '
    "endpoint's error for that item alone (400 invalid item, 403, 404, 409, 413); the other "
    "items are stored."
)


# --- Views ---------------------------------------------------------------------------------------


class TransactionBatchView(APIView):
    @extend_schema(
        request=TransactionBatchInSerializer,
        responses={200: TransactionBatchOutSerializer, **error_responses(413)},
        summary="Send half messages in one batch",
        description=f"{_DESCRIPTION} Idempotent per `msg_id` as the single send: an item whose "
        "msg_id is stored already answers status 200 with the stored transaction. Each item "
        "needs the right for its own producer group (else a 403 item).",
    )
    def post(self, request: Request) -> Response:
        def check(data: dict[str, Any]) -> None:
            require_producer(request, data["producer_group"])

        sends = _items_valid(
            _items(request, TransactionBatchInSerializer), TransactionPrepareInSerializer, check
        )
        outcomes = batch.transaction_prepare_batch(sends=sends)
        return Response(
            _results(
                outcomes,
                lambda o: (
                    status.HTTP_201_CREATED if o[1] else status.HTTP_200_OK,
                    represented(TransactionPrepareOutSerializer, o[0]),
                ),
            )
        )


class TransactionEndBatchView(APIView):
    @extend_schema(
        request=TransactionEndBatchInSerializer,
        responses={200: TransactionEndBatchOutSerializer, **error_responses(413)},
        summary="End transactions in one batch: commit, rollback or unknown",
        description=f"{_DESCRIPTION} Each item is what `POST /transactions/{{id}}/end` answers "
        "for it: 200 with the transaction's state, 404 unknown id, 403 another producer "
        "group's, 409 `transaction_already_resolved`. The commits and rollbacks of PREPARED "
        "transactions are written together (rows locked in id order); the other items are "
        "then answered as single ends, in order.",
    )
    def post(self, request: Request) -> Response:
        def check(data: dict[str, Any]) -> None:
            require_producer(request, data["producer_group"])

        ends = _items_valid(
            _items(request, TransactionEndBatchInSerializer),
            TransactionEndBatchItemInSerializer,
            check,
        )
        outcomes = batch.transaction_end_batch(ends=ends)
        return Response(
            _results(
                outcomes,
                lambda tx: (status.HTTP_200_OK, represented(TransactionEndOutSerializer, tx)),
            )
        )


class MessageBatchView(APIView):
    @extend_schema(
        request=MessageBatchInSerializer,
        responses={200: MessageBatchOutSerializer, **error_responses(413)},
        summary="Send normal messages in one batch (RocketMQ batch send)",
        description=f"{_DESCRIPTION} Needs an admin key or a key with a producer group (else "
        "403 for the whole batch), and each item's `producer_group` as the single send. An "
        "item with `msg_id`, `deliver_at` or `delay_level` is stored as the single send "
        "stores it (idempotent per msg_id; a delay message waits for its time), in the "
        "batch's database transaction.",
    )
    def post(self, request: Request) -> Response:
        require_any_producer(request)

        def check(data: dict[str, Any]) -> None:
            data["producer_group"] = sender_group(request, data.pop("producer_group", ""))

        sends = _items_valid(
            _items(request, MessageBatchInSerializer), MessageSendInSerializer, check
        )
        outcomes = batch.message_send_batch(sends=sends)
        return Response(
            _results(
                outcomes,
                lambda m: (status.HTTP_201_CREATED, send_result_body(m)),
            )
        )

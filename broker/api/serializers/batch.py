"""Serializers of the batch endpoints: an envelope of items, a result per item."""

from __future__ import annotations

from rest_framework import serializers

from broker.api.serializers.fields import StrictCharField, msg_id_validator
from broker.api.serializers.messages import MessageSendInSerializer, SendResultSerializer
from broker.api.serializers.transactions import (
    TransactionEndInSerializer,
    TransactionEndOutSerializer,
    TransactionPrepareInSerializer,
    TransactionPrepareOutSerializer,
)


class TransactionEndBatchItemInSerializer(TransactionEndInSerializer):
    """One end of ``POST /transactions/end-batch``: the single end's body plus its
    ``transaction_id`` (the single end's path parameter, same format)."""

    transaction_id = StrictCharField(validators=[msg_id_validator])


class BatchInSerializer(serializers.Serializer):
    """The envelope of a batch request: ``{<list_field>: [item, ...]}``. Items are left as sent
    (any JSON value) for ``item_serializer``; their count is checked by
    ``broker.services.commitlog.batch.batch_size_check``."""

    list_field: str
    item_serializer: type[serializers.Serializer]


class TransactionBatchInSerializer(BatchInSerializer):
    list_field = "messages"
    item_serializer = TransactionPrepareInSerializer
    messages = serializers.ListField(help_text="Half messages, each the single send's body")


class MessageBatchInSerializer(BatchInSerializer):
    list_field = "messages"
    item_serializer = MessageSendInSerializer
    messages = serializers.ListField(help_text="Normal messages, each the single send's body")


class TransactionEndBatchInSerializer(BatchInSerializer):
    list_field = "ends"
    item_serializer = TransactionEndBatchItemInSerializer
    ends = serializers.ListField(help_text="Ends, each the single end's body and transaction_id")


class BatchOutSerializer(serializers.Serializer):
    """A batch's answer: ``{"results": [...]}``, one item per request item, in order, either
    ``{"status": <ok_statuses>, "body": <item_serializer's shape>}`` (the single operation's
    status and body) or ``{"status": 4xx, "error": {"code", "message", "details"}}`` (the
    single operation's error status and error object, for that item alone)."""

    item_serializer: type[serializers.Serializer]
    ok_statuses: tuple[int, ...]
    results = serializers.ListField(child=serializers.DictField())


class TransactionBatchOutSerializer(BatchOutSerializer):
    item_serializer = TransactionPrepareOutSerializer
    ok_statuses = (201, 200)


class MessageBatchOutSerializer(BatchOutSerializer):
    item_serializer = SendResultSerializer
    ok_statuses = (201,)


class TransactionEndBatchOutSerializer(BatchOutSerializer):
    item_serializer = TransactionEndOutSerializer
    ok_statuses = (200,)

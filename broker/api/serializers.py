"""Input validation and output shapes of api-v1. Inputs check form; services check meaning."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, ClassVar

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from broker.constants import (
    NAME_PATTERN,
    RECEIVE_INVISIBLE_DURATION_MS,
    RECEIVE_MAX_MESSAGES,
    RECEIVE_WAIT_MS,
    SEND_OK,
)
from broker.models import (
    ConsumerGroup,
    Message,
    ProducerGroup,
    ReconciliationRun,
    Topic,
    Transaction,
)
from broker.rules.anomalies import AnomalyKind
from broker.rules.states import END_ACTIONS, RESOLVING_ACTIONS, TransactionState
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN, system_topic_pattern
from broker.services.admin import RESERVED_GROUP_PREFIXES
from broker.services.audit import REASON_MAX_LENGTH


class CompiledRegexValidator(RegexValidator):
    """Django's ``RegexValidator`` with its pattern compiled when it is made: Django keeps it as
    a lazy object, and every match then goes through the proxy (2% of a batch's handling, the
    validators of names and msg_ids running for every item). Same arguments, messages, codes
    and equality as Django's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.regex = re.compile(self.regex.pattern, self.regex.flags)


name_validator = CompiledRegexValidator(
    NAME_PATTERN,
    "Must match ^[%%|a-zA-Z0-9_-]{1,127}$.",
    code="invalid_name",  # %% : message % params
)
msg_id_validator = CompiledRegexValidator(
    r"^[A-Za-z0-9_.:-]{1,64}$", "1-64 characters of A-Z a-z 0-9 _ . : -", code="invalid_msg_id"
)


# --- Strict JSON types ---------------------------------------------------------------------------
# DRF's CharField takes 0, 1.5 and true as "0", "1.5" and "True", and its IntegerField takes "5"
# and 5.0 as 5: a client's mistake would be stored silently as something it did not send. Every
# JSON body field of api-v1 is one of the strict fields below (the OpenAPI schema's types, and
# nothing else); a value of another JSON type is a 400 ``invalid_input`` naming the field. Query
# parameters arrive as strings by nature: their integers stay DRF's ``IntegerField``.


class _EmptyQueryValueMixin:
    """An empty query parameter (``?topic=``) is the empty string, not DRF's "omitted": a
    field that may not be blank refuses it (400) rather than ignoring it."""

    field_name: str

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary) and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)  # type: ignore[misc]


class StrictChoiceField(_EmptyQueryValueMixin, serializers.ChoiceField):
    """DRF's ``ChoiceField`` (only the listed strings) where an empty query value is refused."""


class StrictCharField(_EmptyQueryValueMixin, serializers.CharField):
    """A string field that takes only a JSON string (a number, boolean, array or object is
    400 ``invalid``: "Not a valid string.") and keeps it as sent (no trimming of
    whitespace, unless ``trim_whitespace=True``); otherwise DRF's ``CharField``.

    A lone surrogate is refused as DRF's ``ProhibitSurrogateCharactersValidator`` refuses it
    (400 ``surrogate_characters_not_allowed``, naming the first one), found by the UTF-8
    encoder instead of a Python loop over every character (a 1 KB body cost ~0.2 ms)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitSurrogateCharactersValidator)
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            validator = ProhibitSurrogateCharactersValidator
            message = validator.message.format(code_point=ord(value[exc.start]))
            raise serializers.ValidationError(message, code=validator.code) from None
        return value


class StrictURLField(serializers.URLField):
    """``URLField`` (http, https, ftp, ftps per Django's validator) that takes only a JSON
    string, as ``StrictCharField``."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer field of a JSON body that takes only a JSON integer (as JSON Schema counts
    them: 5 or 5.0): a string ("5"), a fraction (5.5) or a boolean is 400 ``invalid`` ("A
    valid integer is required."); min and max as DRF's ``IntegerField``."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean field that takes only JSON ``true`` or ``false`` (DRF's also takes "yes", 1,
    "on" and the like): anything else is 400 ``invalid`` ("Must be a valid boolean.")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


def NameField(**kwargs: Any) -> serializers.CharField:  # noqa: N802 - a field factory
    """A topic or group name: a JSON string matching api-v1's ``^[%|a-zA-Z0-9_-]{1,127}$``."""
    return StrictCharField(max_length=127, validators=[name_validator], **kwargs)


def body_fields(message: Message) -> dict[str, str]:
    """``{"body": text}`` for a body sent as text, else ``{"body_base64": ...}``."""
    raw = bytes(message.body)
    if message.body_is_text:
        return {"body": raw.decode("utf-8")}
    return {"body_base64": base64.b64encode(raw).decode("ascii")}


class MessageInSerializer(serializers.Serializer):
    """A message as a producer sends it: exactly one of ``body`` or ``body_base64``.

    The validated data are the send service's keyword arguments: ``topic``, ``tags``,
    ``keys``, ``properties``, ``body`` (the decoded bytes) and ``body_is_text`` (whether it came
    as ``body``), plus the fields a subclass adds.
    """

    topic = NameField()
    tags = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    keys = StrictCharField(max_length=1024, required=False, allow_blank=True, default="")
    body = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    body_base64 = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    properties = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_text, has_b64 = "body" in attrs, "body_base64" in attrs
        if has_text == has_b64:
            raise serializers.ValidationError({"body": "Send exactly one of body or body_base64."})
        if has_text:
            attrs["body"] = attrs["body"].encode("utf-8")
            attrs["body_is_text"] = True
        else:
            try:
                attrs["body"] = base64.b64decode(attrs.pop("body_base64"), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise serializers.ValidationError({"body_base64": "Not valid base64."}) from exc
            attrs["body_is_text"] = False
        return attrs


class MessageSendInSerializer(MessageInSerializer):
    producer_group = NameField(required=False, help_text="Which of the key's producer groups sends")


class TransactionPrepareInSerializer(MessageInSerializer):
    producer_group = NameField()
    msg_id = StrictCharField(required=False, validators=[msg_id_validator])
    check_immunity_seconds = StrictIntegerField(required=False, allow_null=True)


class TransactionEndInSerializer(serializers.Serializer):
    producer_group = NameField()
    action = StrictChoiceField(choices=END_ACTIONS)
    from_transaction_check = StrictBooleanField(required=False, default=False)
    remark = StrictCharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=1024
    )


class TransactionResolveInSerializer(serializers.Serializer):
    """An operator's resolution (admin key): commit or roll back, and why."""

    action = StrictChoiceField(choices=RESOLVING_ACTIONS)
    reason = StrictCharField(
        max_length=REASON_MAX_LENGTH,
        # Not blank: something besides whitespace (the service's reason_required), no NUL.
        validators=[CompiledRegexValidator(r"^[^\u0000]*[^\s\u0000][^\u0000]*$", code="blank")],
        help_text="Why (required, not blank): kept in the audit trail with the access key's name.",
    )


class TransactionResolveInputSerializer(TransactionResolveInSerializer):
    """What the resolve view validates: a missing, null or blank ``reason`` passes through to
    ``transaction_operator_resolve``, which answers 400 ``reason_required`` for all three."""

    reason = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=REASON_MAX_LENGTH,
    )


class TransactionResumeCheckInSerializer(serializers.Serializer):
    """An operator's resume-check (admin key): the body is optional (api-v1), its reason too."""

    reason = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=REASON_MAX_LENGTH,
        help_text="Why (optional): kept in the audit log with the access key's name.",
    )


class TransactionListQuerySerializer(serializers.Serializer):
    state = StrictChoiceField(choices=TransactionState.values, required=False)
    producer_group = NameField(required=False)
    topic = NameField(required=False)


class MessageQuerySerializer(serializers.Serializer):
    topic = NameField()
    key = StrictCharField(max_length=1024)


class NewNameInSerializer(serializers.Serializer):
    """A create body whose ``name`` may not be one the broker keeps for itself: the service
    refuses those (400), and the subclass's ``reserved_name_pattern`` (a regular expression)
    says which for the OpenAPI document (``broker.api.schema.NewNameSchema``)."""

    reserved_name_pattern: ClassVar[str]
    name = NameField()


class TopicInSerializer(NewNameInSerializer):
    reserved_name_pattern = system_topic_pattern()  # broker.rules.topics.is_system_topic
    queue_nums = StrictIntegerField(min_value=QUEUE_NUMS_MIN, max_value=QUEUE_NUMS_MAX, default=4)


RESERVED_GROUP_PATTERN = "^(?:" + "|".join(re.escape(p) for p in RESERVED_GROUP_PREFIXES) + ")"
"""The group names ``broker.services.admin.group_name_validate`` refuses (reserved_group)."""


class ProducerGroupInSerializer(NewNameInSerializer):
    reserved_name_pattern = RESERVED_GROUP_PATTERN
    check_url = StrictURLField(max_length=2048, allow_null=True, required=False, default=None)


class ProducerGroupPatchSerializer(serializers.Serializer):
    check_url = StrictURLField(max_length=2048, allow_null=True)


class ConsumerGroupInSerializer(NewNameInSerializer):
    reserved_name_pattern = RESERVED_GROUP_PATTERN
    max_delivery_attempts = StrictIntegerField(min_value=1, max_value=1000, required=False)


class ReceiveInSerializer(serializers.Serializer):
    topic = NameField()
    max_messages = StrictIntegerField(
        min_value=RECEIVE_MAX_MESSAGES[0], max_value=RECEIVE_MAX_MESSAGES[1], default=32
    )
    invisible_duration_ms = StrictIntegerField(
        min_value=RECEIVE_INVISIBLE_DURATION_MS[0],
        max_value=RECEIVE_INVISIBLE_DURATION_MS[1],
        default=30000,
    )
    wait_ms = StrictIntegerField(
        min_value=RECEIVE_WAIT_MS[0], max_value=RECEIVE_WAIT_MS[1], default=0
    )


class AckInSerializer(serializers.Serializer):
    receipt_handles = serializers.ListField(
        child=StrictCharField(max_length=64), min_length=1, max_length=1024
    )


TRANSACTION_PAGE_DEFAULT = 100
TRANSACTION_PAGE_MAX = 1000


class PageQuerySerializer(serializers.Serializer):
    """A page of ``GET /api/v1/transactions``: ``page`` (from 1) and ``page_size`` (1 to
    ``TRANSACTION_PAGE_MAX``), integers in the query string; anything else is 400."""

    page = serializers.IntegerField(min_value=1, required=False)
    page_size = serializers.IntegerField(
        min_value=1, max_value=TRANSACTION_PAGE_MAX, required=False
    )


class CheckRequestsQuerySerializer(serializers.Serializer):
    wait_ms = serializers.IntegerField(min_value=0, max_value=30000, default=0)
    max_requests = serializers.IntegerField(min_value=1, max_value=32, default=32)


# --- Outputs ------------------------------------------------------------------------------------


class ErrorDetailOutSerializer(serializers.Serializer):
    """The contract's error object: ``code`` (snake_case), ``message`` (one human sentence),
    ``details`` (per code; ``fields`` for ``invalid_input``)."""

    code = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    details = serializers.DictField()


class ErrorOutSerializer(serializers.Serializer):
    """Every error answer of api-v1: ``{"error": {"code", "message", "details"}}``
    (``broker.api.exceptions.error_body``)."""

    error = ErrorDetailOutSerializer()


class TopicOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = Topic
        fields = ["name", "queue_nums", "created_timestamp"]


class QueueOffsetsSerializer(serializers.Serializer):
    queue_id = serializers.IntegerField()
    min_offset = serializers.IntegerField()
    max_offset = serializers.IntegerField()


class TopicDetailOutSerializer(TopicOutSerializer):
    queues = QueueOffsetsSerializer(many=True, read_only=True)

    class Meta(TopicOutSerializer.Meta):
        fields = [*TopicOutSerializer.Meta.fields, "queues"]


class ProducerGroupOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProducerGroup
        fields = [
            "name",
            "check_url",
            "created_timestamp",
            "unreachable_since",
            "last_check_error",
            "last_poll_timestamp",
            "check_failures",
            "check_backoff_until",
        ]


class ProducerGroupCreatedSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProducerGroup
        fields = ["name", "check_url", "check_secret", "created_timestamp"]


class ConsumerGroupOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConsumerGroup
        fields = ["name", "max_delivery_attempts", "created_timestamp"]


class SendResultSerializer(serializers.Serializer):
    """RocketMQ's SendResult of a normal message: SEND_OK and where the message is stored."""

    status = serializers.CharField(default=SEND_OK)
    msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()


class MessageContentSerializer(serializers.Serializer):
    """What the producer sent, in every output that shows a message: its msg_id, tags and
    keys, exactly one of body / body_base64 (``body_fields``), properties and birth time."""

    msg_id = serializers.CharField()
    tags = serializers.CharField()
    keys = serializers.CharField()
    body = serializers.CharField(required=False)
    body_base64 = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField())
    born_timestamp = serializers.IntegerField()


class StoredMessageSerializer(MessageContentSerializer):
    """A stored message: its content, where it is stored and when. Every declared field is
    read from the ``Message`` of that name, the body as ``body_fields`` says."""

    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    store_timestamp = serializers.IntegerField()

    def to_representation(self, instance: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.fields:
            if name == "body":
                out.update(body_fields(instance))
            elif name != "body_base64":
                out[name] = getattr(instance, name)
        return out


class MessageOutSerializer(StoredMessageSerializer):
    """A stored message as its producer or an admin looks it up (RocketMQ viewMessage)."""

    commit_log_offset = serializers.IntegerField()
    producer_group = serializers.CharField()


class ReceivedMessageSerializer(StoredMessageSerializer):
    """A message handed to a consumer (``broker.services.consumers.Received``)."""

    delivery_attempt = serializers.IntegerField()
    receipt_handle = serializers.CharField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        message = StoredMessageSerializer().to_representation(instance.message)
        return {
            **message,
            "delivery_attempt": instance.delivery_attempt,
            "receipt_handle": instance.receipt_handle,
        }


class ReceiveOutSerializer(serializers.Serializer):
    messages = ReceivedMessageSerializer(many=True)


class AckFailureSerializer(serializers.Serializer):
    receipt_handle = serializers.CharField()
    code = serializers.CharField()


class AckOutSerializer(serializers.Serializer):
    acked = serializers.IntegerField()
    failed = AckFailureSerializer(many=True)


class TransactionPrepareOutSerializer(serializers.Serializer):
    """The SendResult of a half message: its transaction id (= msg_id), where the half message
    is stored, and the transaction's state."""

    status = serializers.CharField(default=SEND_OK)
    transaction_id = serializers.CharField()
    msg_id = serializers.CharField(source="transaction_id")
    commit_log_offset = serializers.IntegerField(source="half_commit_log_offset")
    half_queue_offset = serializers.IntegerField()
    state = serializers.CharField()


class TransactionEndOutSerializer(serializers.Serializer):
    """``{"transaction_id", "state"}``, plus where the message went once COMMITTED."""

    transaction_id = serializers.CharField()
    state = serializers.CharField()
    msg_id = serializers.CharField(required=False)
    topic = serializers.CharField(required=False)
    queue_id = serializers.IntegerField(required=False)
    queue_offset = serializers.IntegerField(required=False)

    def to_representation(self, instance: Transaction) -> dict[str, Any]:
        out: dict[str, Any] = {"transaction_id": instance.transaction_id, "state": instance.state}
        if instance.state == TransactionState.COMMITTED:
            out.update(
                msg_id=instance.transaction_id,
                topic=instance.topic,
                queue_id=instance.queue_id,
                queue_offset=instance.queue_offset,
            )
        return out


class TransactionOutSerializer(serializers.ModelSerializer):
    class Meta:
        model = Transaction
        fields = [
            "transaction_id",
            "producer_group",
            "topic",
            "tags",
            "keys",
            "state",
            "check_times",
            "born_timestamp",
            "resolved_timestamp",
            "resolved_by",
            "next_check_timestamp",
            "discard_reason",
        ]


class CheckRequestOutSerializer(MessageContentSerializer):
    """A back-check, as POSTed to check_url or handed to a poller (api-v1, Back-check): the
    half message's content and where it is stored, and the check's number."""

    transaction_id = serializers.CharField()
    producer_group = serializers.CharField()
    topic = serializers.CharField()
    check_times = serializers.IntegerField()
    commit_log_offset = serializers.IntegerField()
    half_queue_offset = serializers.IntegerField()


class CheckRequestsOutSerializer(serializers.Serializer):
    check_requests = CheckRequestOutSerializer(many=True)


class TimelineEntrySerializer(serializers.Serializer):
    """One fact of a transaction's history (``broker.selectors_console.TimelineEntry``):
    ``timestamp`` ms since the epoch (null when not journalled), ``kind``, ``title``,
    ``actor`` (who caused it, or "") and the journal's ``detail``."""

    timestamp = serializers.IntegerField(allow_null=True)
    kind = serializers.CharField()
    title = serializers.CharField()
    actor = serializers.CharField(allow_blank=True)
    detail = serializers.DictField()


class TransactionTimelineOutSerializer(serializers.Serializer):
    """``GET /api/v1/transactions/{id}/timeline``: the transaction's id and current state, and
    its timeline, oldest first."""

    transaction_id = serializers.CharField()
    state = serializers.CharField()
    timeline = TimelineEntrySerializer(many=True)


# --- Reconciliation (addition to api-v1: docs/api.md) ------------------------------------------

ANOMALY_PAGE_DEFAULT = 1000
ANOMALY_PAGE_MAX = 10000
# A larger OFFSET overflows the database's bigint; no run stores anywhere near this many.
ANOMALY_OFFSET_MAX = 2**31 - 1


class ReconciliationRunQuerySerializer(serializers.Serializer):
    """Which of a run's stored anomalies to include: ``kind`` (one ``AnomalyKind``), paged by
    ``limit`` and ``offset`` in the job's order (kind, then transaction id)."""

    kind = serializers.ChoiceField(choices=AnomalyKind.choices, required=False)
    limit = serializers.IntegerField(
        min_value=1, max_value=ANOMALY_PAGE_MAX, default=ANOMALY_PAGE_DEFAULT
    )
    offset = serializers.IntegerField(min_value=0, max_value=ANOMALY_OFFSET_MAX, default=0)


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

    limit = serializers.IntegerField(
        min_value=1, max_value=RUNS_PAGE_MAX, default=RUNS_PAGE_DEFAULT
    )
    before = serializers.IntegerField(min_value=1, max_value=RUN_ID_MAX, required=False)


class ReconciliationRunsOutSerializer(serializers.Serializer):
    """``GET /api/v1/reconciliation/runs``: runs newest first, whatever their state (the first
    is the latest decision: a run, or a skip saying why), and ``next_before``, the ``before``
    of the next (older) page, null on the last."""

    runs = ReconciliationRunSummaryOutSerializer(many=True)
    next_before = serializers.IntegerField(allow_null=True)


# --- Batches (api-v1 "Batches"; broker/api/views_batch.py) -------------------------------------
# A batch is validated in two steps: the envelope here (a list under ``list_field``), then each
# item with the single operation's serializer (``item_serializer``), so that a bad item is that
# item's 400 and not the whole batch's. The OpenAPI shapes of these serializers are written by
# ``broker.api.views_batch`` (``BatchInSchema``, ``BatchOutSchema``).


class TransactionEndBatchItemInSerializer(TransactionEndInSerializer):
    """One end of ``POST /transactions/end-batch``: the single end's body plus its
    ``transaction_id`` (the single end's path parameter, same format)."""

    transaction_id = StrictCharField(validators=[msg_id_validator])


class BatchInSerializer(serializers.Serializer):
    """The envelope of a batch request: ``{<list_field>: [item, ...]}``. Items are left as sent
    (any JSON value) for ``item_serializer``; their count is checked by
    ``broker.services.batch.batch_size_check``."""

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

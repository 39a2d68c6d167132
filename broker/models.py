"""Storage, following RocketMQ's own design.

- ``Message`` is the commit log: every stored message, whatever its topic, with its physical
  offset (``commit_log_offset``, the primary key: unique and increasing, like RocketMQ's
  physical offset, though not a byte position). Half messages live on
  ``RMQ_SYS_TRANS_HALF_TOPIC``, Op messages on ``RMQ_SYS_TRANS_OP_HALF_TOPIC``.
- ``ConsumeQueue`` is the per-queue counter: ``max_offset`` is the next queue offset of that
  queue. An append takes the row lock with ``UPDATE ... RETURNING`` in the same database
  transaction as the insert, so queue offsets are gap-free, and since the lock is held until
  commit, the committed offsets of a queue are always a contiguous prefix. The unique index
  ``(topic, queue_id, queue_offset)`` on the commit log is the consume queue's position index.
- ``Transaction`` is derived state over the half and Op logs (what a scan needs to find due
  checks with an index read); ``Resolution`` is the one-per-half-message record behind each Op
  message; ``TransactionEvent`` the audit trail of checks, discards and operator actions.
- ``ConsumerOffset`` and ``Delivery`` give RocketMQ 5 SimpleConsumer semantics.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import connection, models
from django.db.models import Q

from broker.rules.alerts import AlertKind, AlertSeverity, NotificationEvent
from broker.rules.grants import CONSUMER_GROUP, PRODUCER_GROUP
from broker.rules.states import ResolutionAction, ResolvedBy, TransactionState
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN


def now_ms() -> int:
    """Milliseconds since the Unix epoch, as RocketMQ's ``*_timestamp`` fields."""
    return time.time_ns() // 1_000_000


M = TypeVar("M", bound=models.Model)


@functools.cache
def _field_defaults(model: type[models.Model]) -> tuple[tuple[str, Any], ...]:
    """``model``'s concrete fields in order, as (attribute name, the field's ``get_default``)."""
    return tuple((f.attname, f.get_default) for f in model._meta.concrete_fields)


@functools.cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    """``model``'s concrete fields' attribute names, in field order."""
    return tuple(f.attname for f in model._meta.concrete_fields)


def model_from_row(model: type[M], row: Sequence[Any]) -> M:
    """The instance of a row read by raw SQL holding every concrete column of ``model`` in
    field order (``SELECT t.*`` or the columns listed from ``_meta.concrete_fields``), built
    as the ORM builds a row it read (``Model.from_db``; no ``from_db_value`` conversions)."""
    return model.from_db(connection.alias, _attnames(model), row)


def model_new(model: type[M], **values: Any) -> M:
    """The unsaved instance ``model(**values)`` makes (a field not given gets its default),
    built as Django builds a row it read: one value per concrete field, in field order, for
    about 60% of the keyword path's cost (a send builds two per half message, a batch of 32
    sixty-four). For models without relations; ``values`` are attribute names of concrete
    fields.

    Raises:
        TypeError: a value for something that is not a concrete field of ``model``.
    """
    args = [
        values.pop(name) if name in values else default()
        for name, default in _field_defaults(model)
    ]
    if values:
        raise TypeError(f"{model.__name__} has no concrete fields {', '.join(sorted(values))}")
    return model(*args)


class Topic(models.Model):
    """A topic and its number of queues (RocketMQ TopicConfig readQueueNums/writeQueueNums)."""

    name = models.CharField(max_length=127, unique=True)
    queue_nums = models.PositiveIntegerField()
    system = models.BooleanField(default=False, help_text="Broker-owned (RMQ_SYS_*, %DLQ%*, ...)")
    created_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(queue_nums__gte=QUEUE_NUMS_MIN) & Q(queue_nums__lte=QUEUE_NUMS_MAX),
                name="topic_queue_nums_range",
            )
        ]

    def __str__(self) -> str:
        return self.name


class ConsumeQueue(models.Model):
    """One queue of a topic; ``max_offset`` is the queue offset the next append receives."""

    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    max_offset = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["topic", "queue_id"], name="one_consume_queue")
        ]

    def __str__(self) -> str:
        return f"{self.topic}#{self.queue_id}@{self.max_offset}"


def keys_array() -> models.Func:
    """``string_to_array(keys, ' ')``: a message's or transaction's keys as an array (RocketMQ's
    KEYS property, keys separated by ``MessageConst.KEY_SEPARATOR``, a space). The expression
    of the index ``message_multi_keys``, written once so that the index and the queries
    (``broker.selectors.queries.key_match``) agree."""
    return models.Func(
        models.F("keys"),
        models.Value(" "),
        function="string_to_array",
        output_field=ArrayField(models.TextField()),
    )


MULTI_KEYS = Q(keys__contains=" ")
"""A row of several keys: the condition of the partial index ``message_multi_keys``."""


class Message(models.Model):
    """One message of the commit log (RocketMQ MessageExt)."""

    commit_log_offset = models.BigAutoField(primary_key=True)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    queue_offset = models.BigIntegerField()
    msg_id = models.CharField(max_length=64, help_text="UNIQ_KEY")
    tags = models.CharField(max_length=255, blank=True, default="")
    keys = models.CharField(max_length=1024, blank=True, default="")
    body = models.BinaryField()
    body_is_text = models.BooleanField(default=True, help_text="Sent as `body` (UTF-8), not base64")
    properties = models.JSONField(default=dict, blank=True)
    sys_flag = models.IntegerField(default=0, help_text="MessageSysFlag transaction bits")
    producer_group = models.CharField(max_length=127, blank=True, default="")
    born_timestamp = models.BigIntegerField()
    store_timestamp = models.BigIntegerField(default=now_ms)
    prepared_transaction_offset = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Commit log offset of the half message this commit delivers",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["topic", "queue_id", "queue_offset"], name="one_message_per_queue_offset"
            ),
            # A half message is delivered to its real topic at most once (RocketMQ #5574, #9909).
            models.UniqueConstraint(
                fields=["prepared_transaction_offset"], name="one_delivery_per_half_message"
            ),
        ]
        indexes = [
            models.Index(fields=["msg_id"], name="message_msg_id"),
            # A key search (broker.selectors.queries.key_match, the message search and
            # GET /api/v1/messages?topic&key): a message of one key by equality, one of several
            # by its keys' array. Messages without keys (most half and every Op message) are in
            # neither, so they cost the send path nothing here.
            models.Index(fields=["keys"], name="message_keys", condition=~Q(keys="")),
            GinIndex(keys_array(), name="message_multi_keys", condition=MULTI_KEYS),
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["store_timestamp"], name="message_store_time"),
            # The message search by topic and time (broker.selectors.message_search).
            models.Index(fields=["topic", "store_timestamp"], name="message_topic_store_time"),
        ]

    def __str__(self) -> str:
        return f"{self.topic}#{self.queue_id}@{self.queue_offset} {self.msg_id}"


class ProducerGroup(models.Model):
    """A producer group; its ``check_url`` answers back-checks, or its producers poll for them."""

    name = models.CharField(max_length=127, unique=True)
    check_url = models.URLField(max_length=2048, null=True, blank=True)
    check_secret = models.CharField(max_length=128, help_text="HMAC-SHA256 key of back-checks")
    created_timestamp = models.BigIntegerField(default=now_ms)
    unreachable_since = models.BigIntegerField(
        null=True, blank=True, help_text="First undelivered check since the last delivered one"
    )
    last_check_error = models.CharField(max_length=512, blank=True, default="")
    last_poll_timestamp = models.BigIntegerField(null=True, blank=True)
    check_failures = models.PositiveIntegerField(
        default=0, help_text="Consecutive checks that timed out or could not be delivered"
    )
    check_backoff_until = models.BigIntegerField(
        null=True, blank=True, help_text="No checks to this group before this time (ms)"
    )
    unanswered_since = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="First check round with no answer in time since the last answered one (ms)",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ConsumerGroup(models.Model):
    """A consumer group (RocketMQ SubscriptionGroupConfig: retryMaxTimes)."""

    name = models.CharField(max_length=127, unique=True)
    max_delivery_attempts = models.PositiveIntegerField(default=16)
    created_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AccessKey(models.Model):
    """An access key; only the SHA-256 of its token is stored."""

    name = models.CharField(max_length=127, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key")
    token_hash = models.CharField(max_length=64, unique=True)
    is_admin = models.BooleanField(default=False)
    producer_groups = models.JSONField(default=list, blank=True)
    consumer_groups = models.JSONField(default=list, blank=True)
    created_timestamp = models.BigIntegerField(default=now_ms)
    secret_encrypted = models.TextField(
        blank=True,
        default="",
        help_text="The RocketMQ SecretKey of this AccessKey (MQv2-HMAC-SHA1 over gRPC), "
        "encrypted with a key derived from the server's secret; empty: none",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_prefix}...)"


class OperatorGrant(models.Model):
    """The operator role for one named producer or consumer group, given to a console user or
    an access key that is not a full operator (``broker.rules.grants``): the holder may act on
    the transactions of that producer group, or operate that consumer group, and only view the
    rest. Written by ``broker.services.grants``; read by ``broker.selectors.grants``. The group
    need not exist yet (as an access key's producer and consumer groups)."""

    class Kind(models.TextChoices):
        PRODUCER_GROUP = PRODUCER_GROUP, "producer group"
        CONSUMER_GROUP = CONSUMER_GROUP, "consumer group"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="operator_grants",
        db_index=False,  # operator_grant_user_unique starts with user_id
    )
    access_key = models.ForeignKey(
        AccessKey,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="operator_grants",
        db_index=False,  # operator_grant_key_unique starts with access_key_id
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    group = models.CharField(max_length=127, help_text="The producer or consumer group's name")
    granted_by = models.CharField(max_length=160, blank=True, default="")
    granted_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["kind", "group"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, access_key__isnull=True)
                | Q(user__isnull=True, access_key__isnull=False),
                name="operator_grant_one_holder",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[PRODUCER_GROUP, CONSUMER_GROUP]),
                name="operator_grant_kind_valid",
            ),
            # broker.selectors.grants.operator_scope reads a holder's grants by these.
            models.UniqueConstraint(
                fields=["user", "kind", "group"],
                condition=Q(user__isnull=False),
                name="operator_grant_user_unique",
            ),
            models.UniqueConstraint(
                fields=["access_key", "kind", "group"],
                condition=Q(access_key__isnull=False),
                name="operator_grant_key_unique",
            ),
        ]

    def __str__(self) -> str:
        holder = f"user {self.user_id}" if self.user_id else f"access key {self.access_key_id}"
        return f"{holder}: operator of {self.get_kind_display()} {self.group}"


class Transaction(models.Model):
    """Derived state of one transactional message, keyed by its transaction id (= UNIQ_KEY).

    Everything here follows from the half message, its Op message and the check events; it is
    kept so that the scan finds due checks with one index read instead of re-reading history.
    """

    transaction_id = models.CharField(max_length=64, primary_key=True)
    producer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127, help_text="REAL_TOPIC")
    queue_id = models.PositiveIntegerField(help_text="REAL_QID")
    tags = models.CharField(max_length=255, blank=True, default="")
    keys = models.CharField(max_length=1024, blank=True, default="")
    half_queue_id = models.PositiveIntegerField()
    half_queue_offset = models.BigIntegerField()
    half_commit_log_offset = models.BigIntegerField()
    state = models.CharField(
        max_length=16, choices=TransactionState.choices, default=TransactionState.PREPARED
    )
    check_times = models.PositiveIntegerField(default=0, help_text="Checks delivered")
    check_immunity_ms = models.BigIntegerField(help_text="Delay of the first check after birth")
    born_timestamp = models.BigIntegerField()
    next_check_timestamp = models.BigIntegerField(null=True, blank=True)
    last_check_timestamp = models.BigIntegerField(null=True, blank=True)
    undelivered_checks = models.PositiveIntegerField(
        default=0, help_text="Consecutive checks that could not be delivered (backoff)"
    )
    resolved_timestamp = models.BigIntegerField(null=True, blank=True)
    resolved_by = models.CharField(max_length=16, choices=ResolvedBy.choices, null=True, blank=True)
    queue_offset = models.BigIntegerField(null=True, blank=True, help_text="Delivered queue offset")
    discard_reason = models.CharField(max_length=32, blank=True, default="")
    producer_client_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The RocketMQ client (x-mq-client-id) that sent the half message over gRPC; "
        "empty over HTTP. Its checks go over telemetry.",
    )

    class Meta:
        ordering = ["born_timestamp", "transaction_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["half_queue_id", "half_queue_offset"],
                name="one_transaction_per_half_offset",
            ),
            models.CheckConstraint(
                condition=Q(state__in=TransactionState.values), name="transaction_state_valid"
            ),
            models.CheckConstraint(
                condition=(Q(state="PREPARED", resolved_by__isnull=True))
                | (
                    Q(
                        state__in=["COMMITTED", "ROLLED_BACK"],
                        resolved_by__in=["producer", "check", "operator"],
                    )
                )
                | Q(state="DISCARDED", resolved_by="discard"),
                name="transaction_resolved_by_matches_state",
            ),
            models.CheckConstraint(
                condition=~Q(state="COMMITTED") | Q(queue_offset__isnull=False),
                name="committed_transaction_has_queue_offset",
            ),
        ]
        indexes = [
            # The back-check scan (broker.services.checks.check_round) reads this one.
            models.Index(
                fields=["half_queue_id", "next_check_timestamp"],
                condition=Q(state="PREPARED"),
                name="transaction_due_checks",
            ),
            # The scan checkpoint (broker.services.checks.checkpoint_advance) reads this one.
            models.Index(
                fields=["half_queue_id", "half_queue_offset"],
                condition=Q(state="PREPARED"),
                name="transaction_pending_offset",
            ),
            models.Index(fields=["producer_group", "state"], name="transaction_group_state"),
            models.Index(fields=["topic", "state"], name="transaction_topic_state"),
            models.Index(fields=["state", "born_timestamp"], name="transaction_state_born"),
            # The console's overview (broker.selectors.overview) reads the last hour's ends.
            models.Index(fields=["resolved_timestamp"], name="transaction_resolved_time"),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.state}"


class Resolution(models.Model):
    """The one resolution (commit or rollback) of a transaction, behind its Op message.

    The unique constraints make a double resolution impossible: one per transaction and one per
    half queue offset (RocketMQ writes one Op message per resolved half offset).
    """

    Action = ResolutionAction

    transaction = models.OneToOneField(
        Transaction, on_delete=models.PROTECT, related_name="resolution"
    )
    half_queue_id = models.PositiveIntegerField()
    half_queue_offset = models.BigIntegerField()
    action = models.CharField(max_length=8, choices=Action.choices)
    resolved_by = models.CharField(max_length=16, choices=ResolvedBy.choices)
    reason = models.TextField(blank=True, default="")
    resolved_timestamp = models.BigIntegerField(default=now_ms)
    op_commit_log_offset = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Commit log offset of the Op message naming this half offset",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["half_queue_id", "half_queue_offset"], name="one_resolution_per_half_offset"
            )
        ]
        indexes = [
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["resolved_timestamp"], name="resolution_time"),
            # The Op flusher (broker.services.op_messages.op_flush) and the scan checkpoint read these.
            models.Index(
                fields=["half_queue_id", "half_queue_offset"],
                condition=Q(op_commit_log_offset__isnull=True),
                name="resolution_unflushed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.action} by {self.resolved_by}"


class TransactionEvent(models.Model):
    """The check and operator journal: every check delivered (with its answer) or not delivered,
    every discard, resume and operator resolution. Append-only and keyed by transaction id, not
    a foreign key, so it outlives the derived ``Transaction`` row it explains: the rebuild
    (``broker.services.recovery``) counts ``check_times`` from it."""

    class Kind(models.TextChoices):
        CHECK_SENT = "check_sent"
        CHECK_UNDELIVERED = "check_undelivered"
        DISCARDED = "discarded"
        RESUMED = "resumed"
        RESOLVED = "resolved"
        CHECK_REQUESTED = "check_requested"  # an operator's "check now" (not a check)
        # A producer's or check answer's commit/rollback refused (409) because the transaction
        # had already ended: journalled after the refusal (broker.services.transactions).
        END_REFUSED = "end_refused"

    transaction_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    timestamp = models.BigIntegerField(default=now_ms)
    check_times = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(
        max_length=24,
        blank=True,
        default="",
        help_text="check_sent: COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW, ACCEPTED (202) or TIMEOUT; "
        "discarded: its reason; resolved: COMMIT or ROLLBACK; check_requested: empty; "
        "end_refused: the refused end, COMMIT or ROLLBACK",
    )
    actor = models.CharField(
        max_length=160,
        blank=True,
        default="",
        help_text="Who: check, scan, operator:<access key name>, console:<username>",
    )
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["timestamp", "id"]
        indexes = [
            models.Index(fields=["transaction_id", "timestamp"], name="event_transaction_time"),
            models.Index(fields=["kind", "outcome"], name="event_kind_outcome"),
            # The console's overview (broker.selectors.overview) reads the last hour's discards.
            models.Index(fields=["kind", "timestamp"], name="event_kind_time"),
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["timestamp"], name="event_time"),
        ]

    def __str__(self) -> str:
        return f"{self.transaction_id} {self.kind}"


class CheckRequest(models.Model):
    """A back-check queued for a producer group without ``check_url``, handed to a poller."""

    transaction = models.ForeignKey(
        Transaction, on_delete=models.CASCADE, related_name="check_requests"
    )
    producer_group = models.CharField(max_length=127)
    created_timestamp = models.BigIntegerField(default=now_ms)
    delivered_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["transaction"],
                condition=Q(delivered_timestamp__isnull=True),
                name="one_queued_check_request",
            )
        ]
        indexes = [
            # check_requests_poll reads the queued requests of one group.
            models.Index(
                fields=["producer_group", "created_timestamp"],
                condition=Q(delivered_timestamp__isnull=True),
                name="check_request_queued",
            )
        ]

    def __str__(self) -> str:
        return f"check {self.transaction_id}"


class ClientConnection(models.Model):
    """A RocketMQ 5 client seen over gRPC, by its ``x-mq-client-id`` (RocketMQ's
    ``ClientChannelInfo`` of ProducerManager / ConsumerManager, rocketmq-dashboard's connection
    lists).

    Written when its telemetry stream sends settings, on each heartbeat and when it ends
    (stream closed or NotifyClientTermination: ``disconnected_timestamp``). ``server`` names
    the gRPC server process holding its telemetry stream, where its back-checks are written.
    A client is live while connected and heard from within ``HALFMOON_GRPC_CLIENT_EXPIRY_MS``.
    """

    class Kind(models.TextChoices):
        PRODUCER = "PRODUCER"
        PUSH_CONSUMER = "PUSH_CONSUMER"
        SIMPLE_CONSUMER = "SIMPLE_CONSUMER"
        OTHER = "OTHER"

    client_id = models.CharField(max_length=255, primary_key=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.OTHER)
    language = models.CharField(max_length=32, blank=True, default="")
    version = models.CharField(max_length=64, blank=True, default="")
    host = models.CharField(max_length=255, blank=True, default="", help_text="Peer address")
    access_key = models.CharField(max_length=127, blank=True, default="", help_text="Key name")
    producer_groups = models.JSONField(default=list, blank=True)
    consumer_group = models.CharField(max_length=127, blank=True, default="")
    topics = models.JSONField(default=list, blank=True)
    server = models.CharField(max_length=255, blank=True, default="")
    connected_timestamp = models.BigIntegerField(default=now_ms)
    last_heartbeat_timestamp = models.BigIntegerField(default=now_ms)
    disconnected_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-connected_timestamp", "client_id"]
        indexes = [
            models.Index(
                fields=["consumer_group"],
                condition=Q(disconnected_timestamp__isnull=True),
                name="client_connected_consumer",
            ),
            models.Index(
                fields=["kind", "last_heartbeat_timestamp"],
                condition=Q(disconnected_timestamp__isnull=True),
                name="client_connected_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.client_id} {self.kind}"


class ConsumerOffset(models.Model):
    """Next queue offset a consumer group has not yet taken from a queue (RocketMQ
    ConsumerOffsetManager). Also holds the half/Op scan checkpoints of ``CID_RMQ_SYS_TRANS``."""

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    offset = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["consumer_group", "topic", "queue_id"], name="one_consumer_offset"
            )
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.topic}#{self.queue_id}@{self.offset}"


class Delivery(models.Model):
    """A message handed to a consumer group and not yet acked (SimpleConsumer in-flight)."""

    consumer_group = models.CharField(max_length=127)
    message = models.ForeignKey(Message, on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=127)
    delivery_attempt = models.PositiveIntegerField(default=1)
    invisible_until_timestamp = models.BigIntegerField()
    receipt_handle = models.CharField(max_length=64, unique=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["consumer_group", "message"], name="one_delivery_per_group"
            )
        ]
        indexes = [
            # messages_receive looks for expired deliveries of a group and topic.
            models.Index(
                fields=["consumer_group", "topic", "invisible_until_timestamp"],
                name="delivery_expiry",
            )
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.message_id} #{self.delivery_attempt}"


class ScanLease(models.Model):
    """A lease on a piece of periodic work (one half queue's scan), held by one worker at a time
    and expiring if that worker dies."""

    name = models.CharField(max_length=64, primary_key=True)
    owner = models.CharField(max_length=128, blank=True, default="")
    expires_timestamp = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} -> {self.owner}"


class MetricWatermark(models.Model):
    """How far ``/metrics`` has folded one append-only journal into ``MetricRollup``: every row
    of ``source`` (``resolution``: ``Resolution``; ``event``: ``TransactionEvent``) with an id
    up to ``last_id`` is counted in the rollup, none above it (``broker.services.metrics``)."""

    source = models.CharField(max_length=16, primary_key=True)
    last_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.source} folded to {self.last_id}"


class MetricRollup(models.Model):
    """Running totals behind the ``/metrics`` counters, folded from the journals so a scrape
    reads what changed since the last one, not the whole history.

    ``source`` ``resolution``: ``kind`` is the resolved state (COMMITTED, ROLLED_BACK),
    ``label`` the topic, ``count`` the transactions, ``sum_ms`` their total time from half
    message to end (ms) and ``buckets`` the cumulative counts at or under each bound of
    ``FINISH_LATENCY_BUCKETS_S``. ``source`` ``event``: ``kind`` and ``label`` are a
    ``TransactionEvent``'s kind and outcome, ``producer_group`` its transaction's producer group
    ("" when that row is gone), ``count`` the events and ``last_timestamp`` the latest event's
    time (ms)."""

    source = models.ForeignKey(
        MetricWatermark, on_delete=models.CASCADE, related_name="rollups", db_column="source"
    )
    kind = models.CharField(max_length=24)
    label = models.CharField(max_length=127, blank=True, default="")
    count = models.BigIntegerField(default=0)
    sum_ms = models.BigIntegerField(default=0)
    buckets = models.JSONField(default=list, blank=True)
    producer_group = models.CharField(max_length=127, blank=True, default="")
    last_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "kind", "label", "producer_group"], name="one_metric_rollup"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.kind} {self.label}: {self.count}"


class AuditEntry(models.Model):
    """One operator action, through the console or the API: who, when, what, why and with what
    result (``broker.services.audit``). The operators' audit log, append-only.

    A single action (commit, rollback, resume-check, check-now of one transaction) is written
    once, in the same database transaction as the action it records (``state`` ``done``), or
    after a refusal (``state`` ``refused``, ``result`` says what ended the transaction), and
    never changes. A bulk action (``bulk-*``) is written at its preview with the frozen set of
    transactions it will change as its ``AuditTarget`` rows; afterwards only its progress
    fields change, forward only (``broker.services.bulk``): ``state`` (previewed, queued,
    running, done), ``result``, ``processed``, ``counts``, ``applied_by``,
    ``applied_timestamp`` and ``finished_timestamp``. A consumer-group operation with a
    preview (``reset-offset``, ``skip-backlog``, ``resend-dead-letters``;
    ``broker.services.consumer_group_ops``) is written at its preview with an empty
    ``reason``: the operator gives the reason when applying it, and it is set then, once,
    with its progress fields. Nothing deletes an entry.
    """

    class Via(models.TextChoices):
        CONSOLE = "console"
        API = "api"

    class Action(models.TextChoices):
        COMMIT = "commit"
        ROLLBACK = "rollback"
        RESUME_CHECK = "resume-check"
        CHECK_NOW = "check-now"
        BULK_COMMIT = "bulk-commit"
        BULK_ROLLBACK = "bulk-rollback"
        BULK_RESUME_CHECK = "bulk-resume-check"
        SILENCE_ALERT = "silence-alert"  # an alert silenced (broker.services.alerts.silences)
        EXPIRE_SILENCE = "expire-silence"  # a silence ended early
        # Consumer-group operations (broker.services.consumer_group_ops): the first two are
        # previewed (scope: the frozen per-queue plan), then applied with the reason.
        RESET_OFFSET = "reset-offset"  # a group's offsets reset to a time
        SKIP_BACKLOG = "skip-backlog"  # a group's offsets moved to the queue ends
        RESEND_MESSAGE = "resend-message"  # one message delivered again to one group
        RESEND_DEAD_LETTER = "resend-dead-letter"  # one dead letter's original, to its group
        RESEND_DEAD_LETTERS = "resend-dead-letters"  # a frozen set of them (targets: the DLQ
        # copies' commit log offsets), run by a Celery task with live progress

    class State(models.TextChoices):
        DONE = "done"
        REFUSED = "refused"
        PREVIEWED = "previewed"
        QUEUED = "queued"
        RUNNING = "running"

    timestamp = models.BigIntegerField(default=now_ms)
    actor = models.CharField(
        max_length=160, help_text="operator:<access key name> (API) or console:<username>"
    )
    via = models.CharField(max_length=8, choices=Via.choices)
    action = models.CharField(max_length=24, choices=Action.choices)
    reason = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices)
    result = models.CharField(max_length=512, blank=True, default="", help_text="Summary")
    scope = models.JSONField(
        default=dict, blank=True, help_text="Bulk: the selection or the filter it was made from"
    )
    total = models.PositiveIntegerField(default=0, help_text="Transactions targeted")
    processed = models.PositiveIntegerField(default=0, help_text="Targets no longer pending")
    counts = models.JSONField(default=dict, blank=True, help_text="Targets by result")
    applied_by = models.CharField(max_length=160, blank=True, default="")
    applied_timestamp = models.BigIntegerField(null=True, blank=True)
    finished_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # The audit page (broker.selectors.audit) filters these, newest first.
            models.Index(fields=["actor", "-id"], name="audit_actor"),
            models.Index(fields=["action", "-id"], name="audit_action"),
            models.Index(fields=["timestamp"], name="audit_timestamp"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.actor} {self.action} ({self.state})"


class AuditTarget(models.Model):
    """One transaction an audit entry acted on, and what happened to it: ``done``,
    ``already_ended`` (``detail`` says what ended it), ``failed`` (``detail.error``) or, for a
    bulk not yet applied to it, ``pending``. ``result`` and ``detail`` change once, from
    ``pending`` to the outcome; a target that is no longer pending is never acted on again."""

    class Result(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        ALREADY_ENDED = "already_ended"
        FAILED = "failed"

    entry = models.ForeignKey(AuditEntry, on_delete=models.PROTECT, related_name="targets")
    transaction_id = models.CharField(max_length=64)
    result = models.CharField(max_length=16, choices=Result.choices, default=Result.PENDING)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["entry", "transaction_id"], name="one_audit_target")
        ]
        indexes = [
            models.Index(fields=["transaction_id", "-entry"], name="audit_target_transaction"),
            models.Index(fields=["entry", "result", "id"], name="audit_target_result"),
        ]

    def __str__(self) -> str:
        return f"#{self.entry_id} {self.transaction_id} {self.result}"


class DeliveryEvent(models.Model):
    """The delivery journal: every message handed to a consumer group (each attempt), acked, or
    moved to the group's DLQ. Append-only and keyed by values, not foreign keys, so it outlives
    the in-flight ``Delivery`` row (deleted on ack) and the message itself once pruned; the
    archive exports it and the reconciliation reads deliveries per consumer group from it."""

    class Kind(models.TextChoices):
        DELIVERED = "delivered"  # handed to a receiver (delivery_attempt says which time)
        ACKED = "acked"
        DEAD_LETTERED = "dead_lettered"  # past max_delivery_attempts, copied to %DLQ%{group}
        # made visible again to the group by an operator (an offset reset back in time, a
        # resend, a dead letter resent): the next receive hands it out as attempt 1
        REDELIVERY = "redelivery"

    consumer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    queue_id = models.PositiveIntegerField()
    queue_offset = models.BigIntegerField()
    commit_log_offset = models.BigIntegerField(help_text="The message's commit log offset")
    msg_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    delivery_attempt = models.PositiveIntegerField(default=1)
    timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        indexes = [
            # The archive export (broker.services.archive) reads closed time segments.
            models.Index(fields=["timestamp"], name="delivery_event_time"),
            # The transaction timeline reads the deliveries of one delivered message.
            models.Index(fields=["commit_log_offset"], name="delivery_event_message"),
            # The dlq_growing alert reads a window of dead letters per consumer group.
            models.Index(
                fields=["consumer_group", "timestamp"],
                condition=Q(kind="dead_lettered"),
                name="delivery_event_dead_letters",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.kind} {self.msg_id}"


class ArchiveWatermark(models.Model):
    """How far the logs are archived (``broker.services.archive``): every row stored before
    ``archived_until_timestamp`` (ms) is in a complete segment of the archive, and rows before
    ``pruned_until_timestamp`` that were final are gone from the database. One row, ``logs``;
    it advances only after a segment is in place with its ``_SUCCESS`` marker."""

    name = models.CharField(max_length=16, primary_key=True)
    archived_until_timestamp = models.BigIntegerField(default=0)
    pruned_until_timestamp = models.BigIntegerField(default=0)
    updated_timestamp = models.BigIntegerField(default=now_ms)

    def __str__(self) -> str:
        return f"{self.name} archived to {self.archived_until_timestamp}"


class ArchiveSegment(models.Model):
    """One archived time segment ``[start_timestamp, end_timestamp)`` (ms) of every log, written
    under ``uri`` (HALFMOON_ARCHIVE_URI at the time), with its row count per archive table
    (``broker.pipeline.schema.ARCHIVE_TABLES``)."""

    start_timestamp = models.BigIntegerField(primary_key=True)
    end_timestamp = models.BigIntegerField()
    uri = models.CharField(max_length=1024)
    rows = models.JSONField(default=dict, help_text="Rows per archive table")
    archived_timestamp = models.BigIntegerField(default=now_ms)
    duration_ms = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["start_timestamp"]

    def __str__(self) -> str:
        return f"segment {self.start_timestamp}-{self.end_timestamp}"


class ReconciliationRun(models.Model):
    """One run of the reconciliation job (``broker.services.reconciliation``): the window of
    half message times it judged (``since_timestamp``..``until_timestamp``, ms), how far the
    archive reached (``as_of_timestamp``), its counts and, once finished, where its Parquet
    output lies. Anomalies beyond HALFMOON_RECONCILE_MAX_STORED_ANOMALIES are counted in
    ``anomaly_counts`` and kept only in the Parquet output.

    A SKIPPED run records a decision not to run (nothing archived yet, or nothing settled
    since the last run): ``reason`` says why and ``settles_timestamp`` when the oldest
    transaction not yet judged settles (None when there is none). Its window is the empty one
    the decision saw; with nothing archived, ``since``, ``until`` and ``as_of`` are None."""

    class State(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"

    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    trigger = models.CharField(max_length=160, help_text="command, beat, or console:<username>")
    since_timestamp = models.BigIntegerField(null=True, blank=True)
    until_timestamp = models.BigIntegerField(null=True, blank=True)
    as_of_timestamp = models.BigIntegerField(null=True, blank=True)
    started_timestamp = models.BigIntegerField(default=now_ms)
    finished_timestamp = models.BigIntegerField(null=True, blank=True)
    spark_master = models.CharField(max_length=255)
    output_uri = models.CharField(max_length=1024, blank=True, default="")
    params = models.JSONField(default=dict, help_text="The settings the run judged by")
    transactions = models.BigIntegerField(default=0, help_text="Transactions judged")
    states = models.JSONField(default=dict, help_text="Transactions by final state")
    anomaly_counts = models.JSONField(default=dict, help_text="Anomalies by kind (all of them)")
    anomalies_stored = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    reason = models.TextField(blank=True, default="", help_text="Why a skipped run did not run")
    settles_timestamp = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Skipped: when the oldest transaction not yet judged settles (ms)",
    )

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "-id"], name="reconciliation_run_state")]

    def __str__(self) -> str:
        return f"run {self.pk} {self.state}"


class ReconciliationAnomaly(models.Model):
    """One anomaly a reconciliation run found (``broker.rules.anomalies.AnomalyKind``), naming
    the transaction (or, for a delivery without a half message, the msg_id) and its evidence."""

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="anomalies")
    kind = models.CharField(max_length=32)
    transaction_id = models.CharField(max_length=64, blank=True, default="")
    msg_id = models.CharField(max_length=64, blank=True, default="")
    producer_group = models.CharField(max_length=127, blank=True, default="")
    topic = models.CharField(max_length=127, blank=True, default="")
    evidence = models.JSONField(default=dict)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "kind"], name="reconciliation_anomaly_kind")]

    def __str__(self) -> str:
        return f"{self.kind} {self.transaction_id or self.msg_id}"


class ReconciliationAnalytics(models.Model):
    """The analytics of a run per producer group, topic and hour of half message time: counts
    by final state, resolution latency percentiles (ms, half stored to end), the check-count
    histogram (``{"0": n, "1": n, ...}``), the discard rate (discarded / transactions) and how
    long the producer group was unreachable in that hour (ms)."""

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="analytics")
    producer_group = models.CharField(max_length=127)
    topic = models.CharField(max_length=127)
    hour_timestamp = models.BigIntegerField(help_text="Start of the hour (ms)")
    transactions = models.BigIntegerField(default=0)
    committed = models.BigIntegerField(default=0)
    rolled_back = models.BigIntegerField(default=0)
    discarded = models.BigIntegerField(default=0)
    pending = models.BigIntegerField(default=0)
    resolution_p50_ms = models.BigIntegerField(null=True, blank=True)
    resolution_p95_ms = models.BigIntegerField(null=True, blank=True)
    resolution_p99_ms = models.BigIntegerField(null=True, blank=True)
    check_histogram = models.JSONField(default=dict)
    discard_rate = models.FloatField(default=0.0)
    unreachable_ms = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["hour_timestamp", "producer_group", "topic"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "producer_group", "topic", "hour_timestamp"],
                name="one_analytics_row_per_run_group_topic_hour",
            )
        ]
        indexes = [
            models.Index(fields=["producer_group", "hour_timestamp"], name="analytics_group_hour")
        ]

    def __str__(self) -> str:
        return f"{self.producer_group} {self.topic} @{self.hour_timestamp}"


# --- Alerts (broker.services.alerts; the rules in broker.rules.alerts) ---------------------------


class AlertRule(models.Model):
    """One of Halfmoon's own alert rules: a ``kind`` (``broker.rules.alerts.KINDS``) watched on
    one group (``group``) or on every group (``group`` ""), firing past ``threshold`` (in the
    kind's unit: seconds, checks left, discards per hour, messages) over ``window_s`` seconds
    where the kind has a window. ``repeat_interval_s``: the reminder interval while an alert
    fires (None: HALFMOON_ALERT_REPEAT_INTERVAL_MS; 0: no reminders). Written through
    ``broker.services.alerts.rules`` only."""

    Kind = AlertKind
    Severity = AlertSeverity

    name = models.CharField(max_length=127, unique=True)
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    group = models.CharField(
        max_length=127, blank=True, default="", help_text="One group, or empty for every group"
    )
    threshold = models.BigIntegerField()
    window_s = models.PositiveIntegerField(default=3600)
    severity = models.CharField(
        max_length=16, choices=AlertSeverity.choices, default=AlertSeverity.WARNING
    )
    repeat_interval_s = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="")
    created_timestamp = models.BigIntegerField(default=now_ms)
    updated_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=AlertKind.values), name="alert_rule_kind_valid"
            ),
            models.CheckConstraint(condition=Q(threshold__gte=0), name="alert_rule_threshold"),
        ]

    def __str__(self) -> str:
        return self.name


class AlertReceiver(models.Model):
    """Where notifications go: a webhook whose body is Alertmanager's (``alertmanager``) or a
    Slack message (``slack``), signed with ``secret`` as back-checks are
    (``X-Halfmoon-Signature``), or e-mail to ``emails`` through Django's mail settings. Every
    enabled receiver gets every notification. Written through
    ``broker.services.alerts.receivers`` only."""

    class Kind(models.TextChoices):
        ALERTMANAGER = "alertmanager"
        SLACK = "slack"
        EMAIL = "email"

    name = models.CharField(max_length=127, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    url = models.URLField(max_length=2048, blank=True, default="")
    emails = models.JSONField(default=list, blank=True)
    secret = models.CharField(max_length=128, help_text="HMAC-SHA256 key of the signature")
    enabled = models.BooleanField(default=True)
    created_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertSilence(models.Model):
    """No notifications of ``rule``'s alerts on ``group`` ("" = every group of the rule) from
    ``starts_timestamp`` until ``ends_timestamp`` (ms): set by an operator with a reason, in the
    audit log (``audit_entry``); ended early by ``expired_by``."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="silences")
    group = models.CharField(max_length=127, blank=True, default="")
    starts_timestamp = models.BigIntegerField(default=now_ms)
    ends_timestamp = models.BigIntegerField()
    reason = models.TextField()
    created_by = models.CharField(max_length=160)
    audit_entry = models.ForeignKey(
        AuditEntry, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    expired_by = models.CharField(max_length=160, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["rule", "ends_timestamp"], name="alert_silence_rule_end")]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.group or '*'} until {self.ends_timestamp}"


class Alert(models.Model):
    """One alert: a rule firing on one group (``subject``, a producer or consumer group as
    ``subject_label`` says) from ``started_timestamp`` until ``resolved_timestamp``. At most
    one firing alert per rule and group; a rule that fires again later makes a new row.
    ``value`` and ``summary``: what the last evaluation saw. ``notified``: a firing
    notification went out (so the resolution is notified too); ``last_notified_timestamp``:
    the last firing or reminder notification. The rule's name, kind and severity are copied,
    so the history outlives a deleted rule."""

    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    rule = models.ForeignKey(
        AlertRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    rule_name = models.CharField(max_length=127)
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    severity = models.CharField(max_length=16, choices=AlertSeverity.choices)
    subject_label = models.CharField(max_length=16)
    subject = models.CharField(max_length=127)
    state = models.CharField(max_length=16, choices=State.choices, default=State.FIRING)
    value = models.FloatField(default=0.0)
    summary = models.CharField(max_length=512, blank=True, default="")
    started_timestamp = models.BigIntegerField(default=now_ms)
    evaluated_timestamp = models.BigIntegerField(default=now_ms)
    resolved_timestamp = models.BigIntegerField(null=True, blank=True)
    notified = models.BooleanField(default=False)
    last_notified_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state="firing"),
                name="one_firing_alert_per_rule_group",
            )
        ]
        indexes = [
            # The console's banner and the evaluation read the firing ones.
            models.Index(
                fields=["started_timestamp"], condition=Q(state="firing"), name="alert_firing"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule_name} on {self.subject} ({self.state})"


class AlertNotification(models.Model):
    """One notification of one alert to one receiver: ``event`` (firing, reminder, resolved),
    its content frozen when queued (``payload``: a ``broker.rules.alert_payloads.AlertSnapshot``)
    and its delivery: ``pending`` (due at ``next_attempt_timestamp``), ``sent``, or ``failed``
    after HALFMOON_ALERT_NOTIFY_MAX_ATTEMPTS attempts with ``last_error``. Never deleted; a
    failed one is shown in the console and may be retried from there."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    alert = models.ForeignKey(Alert, on_delete=models.PROTECT, related_name="notifications")
    receiver = models.ForeignKey(
        AlertReceiver, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    receiver_name = models.CharField(max_length=127)
    event = models.CharField(max_length=16, choices=NotificationEvent.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    payload = models.JSONField(default=dict)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_timestamp = models.BigIntegerField(default=now_ms)
    last_error = models.CharField(max_length=1024, blank=True, default="")
    created_timestamp = models.BigIntegerField(default=now_ms)
    sent_timestamp = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The delivery claims the due pending ones.
            models.Index(
                fields=["next_attempt_timestamp"],
                condition=Q(state="pending"),
                name="alert_notification_due",
            ),
            models.Index(fields=["state", "-id"], name="alert_notification_state"),
        ]

    def __str__(self) -> str:
        return f"{self.event} of {self.alert_id} to {self.receiver_name} ({self.state})"

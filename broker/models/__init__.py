"""Storage, following RocketMQ's own design.

- ``Message`` is the commit log: every stored message, whatever its topic, with its physical
  offset (``commit_log_offset``, the primary key: unique and increasing, like RocketMQ's
  physical offset, though not a byte position). Half messages live on ``RMQ_SYS_TRANS_HALF_TOPIC``,
  Op messages on ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, delay messages on ``RMQ_SYS_WHEEL_TIMER``.
- ``ConsumeQueue`` is the per-queue counter: ``max_offset`` is the next queue offset of that
  queue. An append takes the row lock with ``UPDATE ... RETURNING`` in the same database
  transaction as the insert, so queue offsets are gap-free, and since the lock is held until
  commit, the committed offsets of a queue are always a contiguous prefix. The unique index
  ``(topic, queue_id, queue_offset)`` on the commit log is the consume queue's position index.
- ``Transaction`` is derived state over the half and Op logs (what a scan needs to find due
  checks with an index read); ``Resolution`` is the one-per-half-message record behind each Op
  message; ``TransactionEvent`` the audit trail of checks, discards and operator actions.
- ``ConsumerOffset``, ``Delivery``: SimpleConsumer semantics; ``ScheduledMessage``: delays.
"""

# The models by area; every name is importable from ``broker.models`` as before.
from broker.models.access import AccessKey, OperatorGrant  # noqa: F401
from broker.models.alerts import Alert, AlertNotification, AlertReceiver, AlertRule, AlertSilence  # noqa: F401
from broker.models.archive import ARCHIVE_WATERMARK, ArchiveSegment, ArchiveWatermark  # noqa: F401
from broker.models.audit import AuditEntry, AuditTarget  # noqa: F401
from broker.models.base import model_from_row, model_new  # noqa: F401
from broker.models.commitlog import MULTI_KEYS, ConsumeQueue, Message, Topic, keys_array  # noqa: F401
from broker.models.consumption import (  # noqa: F401
    ClientConnection,
    ConsumerOffset,
    Delivery,
    DeliveryEvent,
    FifoTaken,
)
from broker.models.groups import ConsumerGroup, ProducerGroup, Subscription  # noqa: F401
from broker.models.metrics import MetricRollup, MetricWatermark, ScanLease  # noqa: F401
from broker.models.reconciliation import (  # noqa: F401
    ReconciliationAnalytics,
    ReconciliationAnomaly,
    ReconciliationRun,
)
from broker.models.timers import ScheduledMessage  # noqa: F401
from broker.models.transactions import CheckRequest, Resolution, Transaction, TransactionEvent  # noqa: F401

# The migrations name the clock ``broker.models.now_ms`` as their fields' default.
from broker.rules.clock import now_ms  # noqa: F401, E402

__all__ = [
    "ARCHIVE_WATERMARK",
    "AccessKey",
    "Alert",
    "AlertNotification",
    "AlertReceiver",
    "AlertRule",
    "AlertSilence",
    "ArchiveSegment",
    "ArchiveWatermark",
    "AuditEntry",
    "AuditTarget",
    "CheckRequest",
    "ClientConnection",
    "ConsumeQueue",
    "ConsumerGroup",
    "ConsumerOffset",
    "Delivery",
    "DeliveryEvent",
    "MULTI_KEYS",
    "Message",
    "MetricRollup",
    "MetricWatermark",
    "OperatorGrant",
    "ProducerGroup",
    "ReconciliationAnalytics",
    "ReconciliationAnomaly",
    "ReconciliationRun",
    "Resolution",
    "ScanLease",
    "ScheduledMessage",
    "Subscription",
    "Topic",
    "Transaction",
    "TransactionEvent",
    "keys_array",
    "model_from_row",
    "model_new",
    "now_ms",
]

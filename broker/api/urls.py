"""api-v1 routes (``/api/v1/...``): one row per path, its view and its route name.

Path parameters are typed (``broker.converters``): ``name`` (topic and group names),
``msgid`` (message and transaction ids), ``int``; a value of another format is a 404 before any
view runs."""

from django.urls import path

from broker import converters  # noqa: F401 - registers the name and msgid converters
from broker.api.views.alert_history import (
    AlertDetailView,
    AlertListView,
    AlertNotificationListView,
    AlertNotificationRetryView,
)
from broker.api.views.alert_receivers import (
    AlertReceiverDetailView,
    AlertReceiverListCreateView,
    AlertSilenceDetailView,
    AlertSilenceExpireView,
    AlertSilenceListCreateView,
)
from broker.api.views.alerts import AlertRuleDetailView, AlertRuleListCreateView
from broker.api.views.batch import MessageBatchView, TransactionBatchView, TransactionEndBatchView
from broker.api.views.blocked_message_groups import (
    BlockedMessageGroupListView,
    HeadDeadLetterView,
)
from broker.api.views.broker_settings import BrokerSettingsView
from broker.api.views.bulk import (
    BulkActionApplyView,
    BulkActionCreateView,
    BulkActionDetailView,
    BulkActionTargetsView,
)
from broker.api.views.check_explanations import (
    ProducerGroupCheckExplanationView,
    TransactionCheckExplanationView,
)
from broker.api.views.clients import ConsumerGroupClientsView, ProducerGroupClientsView
from broker.api.views.consumer_group_ops import (
    BacklogSkipCreateView,
    ConsumerGroupOffsetsView,
    DeadLetterListView,
    DeadLetterResendView,
    DeadLetterSetApplyView,
    DeadLetterSetCreateView,
    DeadLetterSetDetailView,
    OffsetResetApplyView,
    OffsetResetCreateView,
    OffsetResetDetailView,
    ResendCreateView,
)
from broker.api.views.incident_export import IncidentExportView
from broker.api.views.long_poll import CheckRequestsView, ReceiveView
from broker.api.views.message_search import MessageDeliveriesView, MessageSearchView
from broker.api.views.messages import (
    AckView,
    ChangeInvisibleDurationView,
    DeadLetterView,
    MessageDetailView,
    MessageListCreateView,
)
from broker.api.views.reconciliation import (
    ReconciliationRunDetailView,
    ReconciliationRunLatestView,
    ReconciliationRunListView,
)
from broker.api.views.scheduled_messages import (
    ScheduledMessageDetailView,
    ScheduledMessageListView,
    ScheduledMessageOperatorRecallView,
    ScheduledMessageRecallView,
)
from broker.api.views.subscriptions import ConsumerGroupSubscriptionsView
from broker.api.views.topology import (
    ConsumerGroupDetailView,
    ConsumerGroupListCreateView,
    ProducerGroupDetailView,
    ProducerGroupListCreateView,
    TopicDetailView,
    TopicListCreateView,
)
from broker.api.views.transactions import (
    TransactionCheckNowView,
    TransactionDetailView,
    TransactionEndView,
    TransactionListCreateView,
    TransactionResolveView,
    TransactionResumeCheckView,
    TransactionTimelineView,
)

_ROUTES = [
    # A producer's transactions first, the routes every send and end resolves (Django tries the
    # routes in order); the batches before ``transactions/<msgid>``, which their fixed paths
    # would otherwise match as a transaction id.
    ("transactions/batch", TransactionBatchView, "transaction-batch"),
    ("transactions/end-batch", TransactionEndBatchView, "transaction-end-batch"),
    ("transactions", TransactionListCreateView, "transaction-list"),
    ("transactions/<msgid:transaction_id>/end", TransactionEndView, "transaction-end"),
    ("transactions/<msgid:transaction_id>", TransactionDetailView, "transaction-detail"),
    (
        "transactions/<msgid:transaction_id>/timeline",
        TransactionTimelineView,
        "transaction-timeline",
    ),
    (
        "transactions/<msgid:transaction_id>/check-explanation",
        TransactionCheckExplanationView,
        "transaction-check-explanation",
    ),
    (
        "transactions/<msgid:transaction_id>/resolve",
        TransactionResolveView,
        "transaction-resolve",
    ),
    (
        "transactions/<msgid:transaction_id>/resume-check",
        TransactionResumeCheckView,
        "transaction-resume-check",
    ),
    (
        "transactions/<msgid:transaction_id>/check-now",
        TransactionCheckNowView,
        "transaction-check-now",
    ),
    ("messages/batch", MessageBatchView, "message-batch"),
    ("messages", MessageListCreateView, "message-list"),
    ("messages/<msgid:msg_id>", MessageDetailView, "message-detail"),
    ("messages/<msgid:msg_id>/deliveries", MessageDeliveriesView, "message-deliveries"),
    ("message-search", MessageSearchView, "message-search"),
    # Delay and timer messages; the producer's recall before ``<msgid:msg_id>``, which its
    # fixed path would otherwise match as a msg id.
    ("scheduled-messages", ScheduledMessageListView, "scheduled-message-list"),
    ("scheduled-messages/recall", ScheduledMessageRecallView, "scheduled-message-recall"),
    (
        "scheduled-messages/<msgid:msg_id>",
        ScheduledMessageDetailView,
        "scheduled-message-detail",
    ),
    (
        "scheduled-messages/<msgid:msg_id>/recall",
        ScheduledMessageOperatorRecallView,
        "scheduled-message-operator-recall",
    ),
    ("incident-exports", IncidentExportView, "incident-export"),
    ("consumer-groups", ConsumerGroupListCreateView, "consumer-group-list"),
    ("consumer-groups/<name:name>", ConsumerGroupDetailView, "consumer-group-detail"),
    ("consumer-groups/<name:group>/receive", ReceiveView, "consumer-receive"),
    ("consumer-groups/<name:group>/ack", AckView, "consumer-ack"),
    ("consumer-groups/<name:name>/clients", ConsumerGroupClientsView, "consumer-group-clients"),
    (
        "consumer-groups/<name:name>/subscriptions",
        ConsumerGroupSubscriptionsView,
        "consumer-group-subscriptions",
    ),
    (
        "consumer-groups/<name:group>/change-invisible-duration",
        ChangeInvisibleDurationView,
        "consumer-change-invisible-duration",
    ),
    ("consumer-groups/<name:group>/dead-letter", DeadLetterView, "consumer-dead-letter"),
    ("topics", TopicListCreateView, "topic-list"),
    ("topics/<name:name>", TopicDetailView, "topic-detail"),
    ("producer-groups", ProducerGroupListCreateView, "producer-group-list"),
    ("producer-groups/<name:name>", ProducerGroupDetailView, "producer-group-detail"),
    (
        "producer-groups/<name:name>/check-explanation",
        ProducerGroupCheckExplanationView,
        "producer-group-check-explanation",
    ),
    (
        "producer-groups/<name:name>/check-requests",
        CheckRequestsView,
        "producer-group-check-requests",
    ),
    ("producer-groups/<name:name>/clients", ProducerGroupClientsView, "producer-group-clients"),
    ("reconciliation/runs", ReconciliationRunListView, "reconciliation-run-list"),
    (
        "reconciliation/runs/latest",
        ReconciliationRunLatestView,
        "reconciliation-run-latest",
    ),
    (
        "reconciliation/runs/<int:run_id>",
        ReconciliationRunDetailView,
        "reconciliation-run-detail",
    ),
    ("alert-rules", AlertRuleListCreateView, "alert-rule-list"),
    ("alert-rules/<name:name>", AlertRuleDetailView, "alert-rule-detail"),
    ("alert-receivers", AlertReceiverListCreateView, "alert-receiver-list"),
    ("alert-receivers/<name:name>", AlertReceiverDetailView, "alert-receiver-detail"),
    ("alert-silences", AlertSilenceListCreateView, "alert-silence-list"),
    ("alert-silences/<int:silence_id>", AlertSilenceDetailView, "alert-silence-detail"),
    (
        "alert-silences/<int:silence_id>/expire",
        AlertSilenceExpireView,
        "alert-silence-expire",
    ),
    ("bulk-actions", BulkActionCreateView, "bulk-action-list"),
    ("bulk-actions/<int:bulk_id>", BulkActionDetailView, "bulk-action-detail"),
    ("bulk-actions/<int:bulk_id>/targets", BulkActionTargetsView, "bulk-action-targets"),
    ("bulk-actions/<int:bulk_id>/apply", BulkActionApplyView, "bulk-action-apply"),
    # Consumer-group operations (broker.api.views.consumer_group_ops).
    ("consumer-groups/<name:group>/offsets", ConsumerGroupOffsetsView, "consumer-group-offsets"),
    ("consumer-groups/<name:group>/offset-resets", OffsetResetCreateView, "offset-reset-list"),
    (
        "consumer-groups/<name:group>/offset-resets/<int:reset_id>",
        OffsetResetDetailView,
        "offset-reset-detail",
    ),
    (
        "consumer-groups/<name:group>/offset-resets/<int:reset_id>/apply",
        OffsetResetApplyView,
        "offset-reset-apply",
    ),
    ("consumer-groups/<name:group>/skip-backlog", BacklogSkipCreateView, "backlog-skip"),
    ("consumer-groups/<name:group>/resends", ResendCreateView, "consumer-group-resend"),
    ("consumer-groups/<name:group>/dead-letters", DeadLetterListView, "dead-letter-list"),
    (
        "consumer-groups/<name:group>/dead-letters/<int:commit_log_offset>/resend",
        DeadLetterResendView,
        "dead-letter-resend-one",
    ),
    (
        "consumer-groups/<name:group>/dead-letter-resends",
        DeadLetterSetCreateView,
        "dead-letter-resend-list",
    ),
    (
        "consumer-groups/<name:group>/dead-letter-resends/<int:resend_id>",
        DeadLetterSetDetailView,
        "dead-letter-resend-detail",
    ),
    (
        "consumer-groups/<name:group>/dead-letter-resends/<int:resend_id>/apply",
        DeadLetterSetApplyView,
        "dead-letter-resend-apply",
    ),
    # A FIFO consumer group's blocked message groups (broker.api.views.blocked_message_groups).
    (
        "consumer-groups/<name:group>/blocked-message-groups",
        BlockedMessageGroupListView,
        "blocked-message-group-list",
    ),
    (
        "consumer-groups/<name:group>/blocked-message-groups/dead-letter-head",
        HeadDeadLetterView,
        "blocked-message-group-dead-letter-head",
    ),
    ("broker-settings", BrokerSettingsView, "broker-settings"),
    ("alerts", AlertListView, "alert-list"),
    ("alerts/<int:alert_id>", AlertDetailView, "alert-detail"),
    ("alert-notifications", AlertNotificationListView, "alert-notification-list"),
    (
        "alert-notifications/<int:notification_id>/retry",
        AlertNotificationRetryView,
        "alert-notification-retry",
    ),
]

urlpatterns = [path(route, view.as_view(), name=name) for route, view, name in _ROUTES]

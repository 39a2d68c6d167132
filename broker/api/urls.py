"""api-v1 routes (``/api/v1/...``): one row per path, its view and its route name.

Path parameters are typed (``broker.api.converters``): ``name`` (topic and group names),
``msgid`` (message and transaction ids), ``int``; a value of another format is a 404 before any
view runs."""

from django.urls import path

from broker.api import (
    converters,  # noqa: F401 - registers the name and msgid converters
    views,
    views_alerts,
    views_batch,
    views_poll,
)

_ROUTES = [
    # A producer's transactions first, the routes every send and end resolves (Django tries the
    # routes in order); the batches before ``transactions/<msgid>``, which their fixed paths
    # would otherwise match as a transaction id.
    ("transactions/batch", views_batch.TransactionBatchView, "transaction-batch"),
    ("transactions/end-batch", views_batch.TransactionEndBatchView, "transaction-end-batch"),
    ("transactions", views.TransactionListCreateView, "transaction-list"),
    ("transactions/<msgid:transaction_id>/end", views.TransactionEndView, "transaction-end"),
    ("transactions/<msgid:transaction_id>", views.TransactionDetailView, "transaction-detail"),
    (
        "transactions/<msgid:transaction_id>/timeline",
        views.TransactionTimelineView,
        "transaction-timeline",
    ),
    (
        "transactions/<msgid:transaction_id>/resolve",
        views.TransactionResolveView,
        "transaction-resolve",
    ),
    (
        "transactions/<msgid:transaction_id>/resume-check",
        views.TransactionResumeCheckView,
        "transaction-resume-check",
    ),
    ("messages/batch", views_batch.MessageBatchView, "message-batch"),
    ("messages", views.MessageListCreateView, "message-list"),
    ("messages/<msgid:msg_id>", views.MessageDetailView, "message-detail"),
    ("consumer-groups", views.ConsumerGroupListCreateView, "consumer-group-list"),
    ("consumer-groups/<name:group>/receive", views_poll.ReceiveView, "consumer-receive"),
    ("consumer-groups/<name:group>/ack", views.AckView, "consumer-ack"),
    ("topics", views.TopicListCreateView, "topic-list"),
    ("topics/<name:name>", views.TopicDetailView, "topic-detail"),
    ("producer-groups", views.ProducerGroupListCreateView, "producer-group-list"),
    ("producer-groups/<name:name>", views.ProducerGroupDetailView, "producer-group-detail"),
    (
        "producer-groups/<name:name>/check-requests",
        views_poll.CheckRequestsView,
        "producer-group-check-requests",
    ),
    ("reconciliation/runs", views.ReconciliationRunListView, "reconciliation-run-list"),
    (
        "reconciliation/runs/latest",
        views.ReconciliationRunLatestView,
        "reconciliation-run-latest",
    ),
    (
        "reconciliation/runs/<int:run_id>",
        views.ReconciliationRunDetailView,
        "reconciliation-run-detail",
    ),
    ("alert-rules", views_alerts.AlertRuleListCreateView, "alert-rule-list"),
    ("alert-rules/<name:name>", views_alerts.AlertRuleDetailView, "alert-rule-detail"),
]

urlpatterns = [path(route, view.as_view(), name=name) for route, view, name in _ROUTES]

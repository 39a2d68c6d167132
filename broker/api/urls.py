"""api-v1 routes (``/api/v1/...``): one row per path, its view and its route name."""

from django.urls import path

from broker.api import views

_ROUTES = [
    ("topics", views.TopicListCreateView, "topic-list"),
    ("topics/<str:name>", views.TopicDetailView, "topic-detail"),
    ("producer-groups", views.ProducerGroupListCreateView, "producer-group-list"),
    ("producer-groups/<str:name>", views.ProducerGroupDetailView, "producer-group-detail"),
    (
        "producer-groups/<str:name>/check-requests",
        views.CheckRequestsView,
        "producer-group-check-requests",
    ),
    ("consumer-groups", views.ConsumerGroupListCreateView, "consumer-group-list"),
    ("consumer-groups/<str:group>/receive", views.ReceiveView, "consumer-receive"),
    ("consumer-groups/<str:group>/ack", views.AckView, "consumer-ack"),
    ("messages", views.MessageListCreateView, "message-list"),
    ("messages/<str:msg_id>", views.MessageDetailView, "message-detail"),
    ("transactions", views.TransactionListCreateView, "transaction-list"),
    ("transactions/<str:transaction_id>", views.TransactionDetailView, "transaction-detail"),
    ("transactions/<str:transaction_id>/end", views.TransactionEndView, "transaction-end"),
    (
        "transactions/<str:transaction_id>/timeline",
        views.TransactionTimelineView,
        "transaction-timeline",
    ),
    (
        "transactions/<str:transaction_id>/resolve",
        views.TransactionResolveView,
        "transaction-resolve",
    ),
    (
        "transactions/<str:transaction_id>/resume-check",
        views.TransactionResumeCheckView,
        "transaction-resume-check",
    ),
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
]

urlpatterns = [path(route, view.as_view(), name=name) for route, view, name in _ROUTES]

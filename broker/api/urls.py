from django.urls import path

from broker.api import views

urlpatterns = [
    path("topics", views.TopicListCreateView.as_view(), name="topic-list"),
    path("topics/<str:name>", views.TopicDetailView.as_view(), name="topic-detail"),
    path(
        "producer-groups", views.ProducerGroupListCreateView.as_view(), name="producer-group-list"
    ),
    path(
        "producer-groups/<str:name>",
        views.ProducerGroupDetailView.as_view(),
        name="producer-group-detail",
    ),
    path(
        "producer-groups/<str:name>/check-requests",
        views.CheckRequestsView.as_view(),
        name="producer-group-check-requests",
    ),
    path(
        "consumer-groups", views.ConsumerGroupListCreateView.as_view(), name="consumer-group-list"
    ),
    path(
        "consumer-groups/<str:group>/receive", views.ReceiveView.as_view(), name="consumer-receive"
    ),
    path("consumer-groups/<str:group>/ack", views.AckView.as_view(), name="consumer-ack"),
    path("messages", views.MessageListCreateView.as_view(), name="message-list"),
    path("messages/<str:msg_id>", views.MessageDetailView.as_view(), name="message-detail"),
    path("transactions", views.TransactionListCreateView.as_view(), name="transaction-list"),
    path(
        "transactions/<str:transaction_id>",
        views.TransactionDetailView.as_view(),
        name="transaction-detail",
    ),
    path(
        "transactions/<str:transaction_id>/end",
        views.TransactionEndView.as_view(),
        name="transaction-end",
    ),
    path(
        "transactions/<str:transaction_id>/resolve",
        views.TransactionResolveView.as_view(),
        name="transaction-resolve",
    ),
    path(
        "transactions/<str:transaction_id>/resume-check",
        views.TransactionResumeCheckView.as_view(),
        name="transaction-resume-check",
    ),
]

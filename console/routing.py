from django.urls import path

from console.consumers import TransactionFeedConsumer

websocket_urlpatterns = [
    path("ws/transactions/", TransactionFeedConsumer.as_asgi()),
]

"""The baseline's URLs: insert, then commit."""

from django.urls import path

from bare import views

urlpatterns = [
    path("bare/insert", views.insert),
    path("bare/<str:msg_id>/commit", views.commit),
]

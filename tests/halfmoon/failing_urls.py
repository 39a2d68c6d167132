"""The project's URLs (and error handlers) plus views that fail on purpose, for the tests of
what an unexpected error answers and logs (``pytest.mark.urls``)."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from halfmoon import urls as project


class FailingAPIView(APIView):
    """A DRF view, open to anyone, whose GET fails."""

    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request: Request) -> Response:
        raise RuntimeError("an unexpected failure in a DRF view")


def failing_view(request: HttpRequest) -> HttpResponse:
    """A plain Django view that fails."""
    raise KeyError("an unexpected failure outside DRF")


def database_view(request: HttpRequest) -> HttpResponse:
    """A plain Django view (no DRF) that reads the database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return HttpResponse("read")


urlpatterns = [
    path("test-database", database_view),
    path("api/v1/test-failing", FailingAPIView.as_view()),
    path("api/v1/test-failing-plain", failing_view),
    path("console/test-failing/", failing_view),
    *project.urlpatterns,
]

handler400 = project.handler400
handler403 = project.handler403
handler404 = project.handler404
handler500 = project.handler500

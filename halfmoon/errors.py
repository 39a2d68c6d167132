"""Error pages: the console's paths (``/console/``) answer HTML pages a person can read; every
other path answers the API contract's JSON error body (``broker.api.exceptions``).

The database unreachable is a 503 on both sides, with ``Retry-After``, ``X-Request-ID`` and the
same warning logged and counted (``broker.api.exceptions.database_unavailable``): the API's JSON
``service_unavailable``, the console's page saying so, which reloads itself once ``/healthz``
says the database answers again (``static/console/database.js``)."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from broker.api.exceptions import (
    DATABASE_UNAVAILABLE_ERRORS,
    bad_request_view,
    database_unavailable,
    not_found_view,
    permission_denied_view,
    server_error_view,
)

CONSOLE_PREFIX = "/console/"

_PAGES = {
    400: ("Bad request", "The request could not be understood."),
    403: (
        "Not allowed",
        "Your account has no console role that allows this. Ask an admin to give you the "
        "viewer, operator or admin role (manage.py create_console_user).",
    ),
    404: ("Not found", "There is nothing at this address."),
    500: ("Server error", "The broker failed to handle this request; it has been logged."),
    503: (
        "Database unavailable",
        "The broker's database does not answer, so this page cannot be shown. Until it does, "
        "the API answers 503 with Retry-After and producers retry their writes; nothing "
        "committed is lost. This page reloads by itself when the database answers again.",
    ),
}


def _console_page(request: HttpRequest, status: int) -> HttpResponse:
    """A self-contained HTML error page (no context processors or database, so it renders even
    when the failure was in those)."""
    title, message = _PAGES[status]
    html = render_to_string(
        "console/error.html",
        {"status": status, "title": title, "message": message, "reload_when_back": status == 503},
    )
    return HttpResponse(html, status=status)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400: HTML under /console/, the JSON error body elsewhere."""
    if request.path.startswith(CONSOLE_PREFIX):
        return _console_page(request, 400)
    return bad_request_view(request, exception)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """403: HTML under /console/, the JSON error body elsewhere."""
    if request.path.startswith(CONSOLE_PREFIX):
        return _console_page(request, 403)
    return permission_denied_view(request, exception)


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404: HTML under /console/, the JSON error body elsewhere."""
    if request.path.startswith(CONSOLE_PREFIX):
        return _console_page(request, 404)
    return not_found_view(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    """500: HTML under /console/, the JSON error body elsewhere; the database unreachable is a
    503 (``Retry-After``) on both."""
    if not request.path.startswith(CONSOLE_PREFIX):
        return server_error_view(request)
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS):
        _, headers = database_unavailable(request, exc)
        response = _console_page(request, 503)
        for name, value in headers.items():
            response[name] = value
        return response
    return _console_page(request, 500)

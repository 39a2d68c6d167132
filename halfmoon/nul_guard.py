"""Refuse a NUL character in a request's path or query string before any view or query runs.

PostgreSQL's text and jsonb types cannot hold NUL (U+0000): a value carrying one reaches the
database only to fail there (``DataError``, a 500). The API's and the console's path
parameters have formats of their own (``broker.converters``); this guard covers every
other route (``/admin/``, ``/metrics``) and every query parameter, API or not:

- NUL in the path: 404, since nothing can be named so (the console's HTML page under
  ``/console/``, the contract's error body elsewhere: ``halfmoon.errors``);
- NUL in a query parameter's name or value: 400, likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse

NUL = "\x00"


class NulGuardMiddleware:
    """Django middleware; raises ``Http404`` (NUL in ``request.path``) or ``BadRequest`` (NUL
    in a query parameter), which Django answers through ``halfmoon.errors``."""

    # Both modes, so under ASGI an async view (the long polls, ``broker.api.views.long_poll``) is
    # not run through a thread held for the whole request.
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._acall(request)
        self._check(request)
        return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        self._check(request)
        return await self.get_response(request)

    @staticmethod
    def _check(request: HttpRequest) -> None:
        if NUL in request.path:
            raise Http404("A path with a NUL character names nothing.")
        for name, values in request.GET.lists():
            if NUL in name or any(NUL in value for value in values):
                raise BadRequest(f"The query parameter {name!r} holds a NUL character.")

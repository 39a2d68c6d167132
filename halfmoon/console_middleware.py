"""The console's middleware, passed over by the API.

api-v1 (``/api/v1/...``) authenticates every request by its access key
(``broker.api.authentication``) and keeps no session: it reads no session, no signed-in user,
no flash message and no CSRF cookie, and every one of its views is CSRF-exempt (DRF's
``APIView``). Django's session, CSRF, authentication and messages middleware serve the console
and ``/admin/`` only, yet on every API request each would do its work and hand it back
unused (a ``SessionStore``, the lazy user, the messages' storage, the CSRF cookie's checks),
a cost paid per message sent (docs/design.md "Serving the API").

Each class here is Django's own middleware, unchanged for every other path, that hands an
api-v1 request straight to the next layer. They stay subclasses of Django's, so the admin's
and django-axes' system checks still find them in ``MIDDLEWARE``. What every path keeps runs
around them in ``settings.MIDDLEWARE``: security headers, the NUL guard, the host check and
``Content-Length`` (``CommonMiddleware``), ``X-Frame-Options``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.deprecation import MiddlewareMixin

API_PATH_PREFIX = "/api/v1/"
"""The paths of api-v1 (``halfmoon.urls``), which pass these middleware by."""


def is_api_request(request: HttpRequest) -> bool:
    """Whether ``request`` is for api-v1 (its ``path_info`` under ``API_PATH_PREFIX``)."""
    return request.path_info.startswith(API_PATH_PREFIX)


def _console_only(middleware: type[MiddlewareMixin]) -> type[MiddlewareMixin]:
    """``middleware`` (a ``MiddlewareMixin`` subclass), run for every request but api-v1's."""

    class ConsoleOnly(middleware):  # type: ignore[valid-type,misc]
        def __call__(self, request: HttpRequest) -> Any:
            if is_api_request(request):
                return self.get_response(request)
            return super().__call__(request)

    ConsoleOnly.__name__ = ConsoleOnly.__qualname__ = f"Console{middleware.__name__}"
    ConsoleOnly.__module__ = __name__
    ConsoleOnly.__doc__ = f"Django's ``{middleware.__name__}``, except for api-v1 requests."
    return ConsoleOnly


ConsoleSessionMiddleware = _console_only(SessionMiddleware)
ConsoleCsrfViewMiddleware = _console_only(CsrfViewMiddleware)
ConsoleAuthenticationMiddleware = _console_only(AuthenticationMiddleware)
ConsoleMessageMiddleware = _console_only(MessageMiddleware)

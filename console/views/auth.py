"""Console pages: sign-in and sign-out (Django's own auth views), and the sign-in lockout page.

- ``console:login`` ``/console/login/``: the sign-in form, Django's ``AuthenticationForm``
  (fields ``username``, ``password``), CSRF-protected; a signed-in visitor is sent on to
  ``next`` or ``LOGIN_REDIRECT_URL`` (the overview).
- ``console:logout`` ``/console/logout/``: POST only (with the CSRF token), then the sign-in
  page (``LOGOUT_REDIRECT_URL``).
- ``locked_out``: django-axes' lockout response (``AXES_LOCKOUT_CALLABLE``), for the console's
  sign-in and /admin/'s alike, once a username and address have failed too often
  (``console.throttle``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path

from console.throttle import lockout_minutes, lockout_scope


class ConsoleLoginView(auth_views.LoginView):
    """The console's sign-in page (``templates/console/auth/login.html``)."""

    template_name = "console/auth/login.html"
    redirect_authenticated_user = True


class ConsoleLogoutView(auth_views.LogoutView):
    """Sign out (POST only, as Django's ``LogoutView``) and go to the sign-in page."""


def locked_out(request: HttpRequest, *args: Any) -> HttpResponse:
    """The page of a refused sign-in while its username and address are locked out
    (``templates/console/auth/locked.html``, status ``AXES_HTTP_RESPONSE_CODE``, 429): for how
    many minutes, and how an administrator unlocks it (``manage.py axes_reset_username``, or the
    access attempt in /admin/).

    django-axes calls it as ``(request, original_response, credentials)`` (sync middleware) or
    ``(request, credentials)`` (async); both are ignored: the username is the form's own field.
    """
    username = request.POST.get(str(settings.AXES_USERNAME_FORM_FIELD), "")
    context = {
        "username": username,
        "scope": lockout_scope(username),
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "minutes": lockout_minutes(),
        "retry_url": request.get_full_path(),
    }
    return render(
        request, "console/auth/locked.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )


urlpatterns: list[URLPattern] = [
    path("login/", ConsoleLoginView.as_view(), name="login"),
    path("logout/", ConsoleLogoutView.as_view(), name="logout"),
]

"""Console pages: sign-in and sign-out (Django's own auth views).

- ``console:login`` ``/console/login/``: the sign-in form, Django's ``AuthenticationForm``
  (fields ``username``, ``password``), CSRF-protected; a signed-in visitor is sent on to
  ``next`` or ``LOGIN_REDIRECT_URL`` (the overview).
- ``console:logout`` ``/console/logout/``: POST only (with the CSRF token), then the sign-in
  page (``LOGOUT_REDIRECT_URL``).
"""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path


class ConsoleLoginView(auth_views.LoginView):
    """The console's sign-in page (``templates/console/auth/login.html``)."""

    template_name = "console/auth/login.html"
    redirect_authenticated_user = True


class ConsoleLogoutView(auth_views.LogoutView):
    """Sign out (POST only, as Django's ``LogoutView``) and go to the sign-in page."""


urlpatterns: list[URLPattern] = [
    path("login/", ConsoleLoginView.as_view(), name="login"),
    path("logout/", ConsoleLogoutView.as_view(), name="logout"),
]

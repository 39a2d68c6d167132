"""Sign-in throttling: django-axes refuses a username and client address after too many failed
sign-ins (settings ``AXES_*``, from ``HALFMOON_LOGIN_FAILURE_LIMIT``,
``HALFMOON_LOGIN_COOLOFF_MINUTES`` and ``HALFMOON_LOGIN_LOCKOUT_BY``; see halfmoon/settings.py).

``SignInThrottleBackend`` is first in ``AUTHENTICATION_BACKENDS``: every sign-in through a
request (the console's form, /admin/'s login) passes it. The refusal page is
``console.views.auth.locked_out``; ``lockout_minutes`` is the one reading of the cool-off.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest


class SignInThrottleBackend(AxesStandaloneBackend):
    """django-axes' check before the password is looked at: a locked-out username and address
    are refused (axes raises ``AxesBackendPermissionDenied``, which Django's ``authenticate``
    turns into a failed sign-in, counted again, and the ``AxesMiddleware`` into the lockout page).

    A call without a request (``authenticate(username=..., password=...)`` in a management
    command or a shell) has no client address to throttle and no one on the network behind it:
    it is passed on to the next backend instead of raising axes'
    ``AxesBackendRequestParameterRequired``. Every sign-in over HTTP carries its request
    (Django's ``AuthenticationForm`` passes it).
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        """None when the sign-in may go on to the password check.

        Raises:
            AxesBackendPermissionDenied: the username and address are locked out.
        """
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def lockout_minutes() -> int:
    """How long a locked-out username and address stay refused after their last attempt, in
    whole minutes (``AXES_COOLOFF_TIME``, from ``HALFMOON_LOGIN_COOLOFF_MINUTES``)."""
    return max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))


def lockout_scope(username: str) -> str:
    """What a lockout refuses, in words for the lockout page, after ``AXES_LOCKOUT_PARAMETERS``
    (``HALFMOON_LOGIN_LOCKOUT_BY``): e.g. ``"for alice from this address"``."""
    user = f"for {username}" if username else "for this username"
    phrases = []
    for parameter in settings.AXES_LOCKOUT_PARAMETERS:
        combined = [parameter] if isinstance(parameter, str) else list(parameter)
        words = []
        if "username" in combined:
            words.append(user)
        if "ip_address" in combined:
            words.append("from this address")
        if words:
            phrases.append(" ".join(words))
    return " or ".join(phrases)

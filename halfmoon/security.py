"""The broker's serving processes refuse to start in production with the development key.

``SECRET_KEY`` signs the admin's and the console's sessions, CSRF tokens and password-reset
links; the development default is in this public repository, so anyone could forge them. The web
server (``halfmoon.asgi``, ``halfmoon.wsgi``), the Celery worker and Celery beat
(``tasks.celery``) call ``serving_secret_key_require`` at start; management commands that need
no secret (migrate, check, create_access_key, demo) do not, so they keep working.
NetBox refuses to start the same way.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from broker.rules.secret_keys import DEVELOPMENT_SECRET_KEY


class InsecureSecretKey(ImproperlyConfigured):
    """Production settings (``DJANGO_DEBUG`` off) with the development ``SECRET_KEY``."""


def secret_key_check(*, secret_key: str, debug: bool, process: str) -> None:
    """Refuse the development key unless ``debug`` is on; ``process`` ("web server", "Celery
    worker", ...) names what is refusing to start in the message.

    Raises:
        InsecureSecretKey: ``debug`` is off and ``secret_key`` is ``DEVELOPMENT_SECRET_KEY``.
    """
    if debug or secret_key != DEVELOPMENT_SECRET_KEY:
        return
    raise InsecureSecretKey(
        f"Halfmoon's {process} refuses to start: DJANGO_DEBUG is off and neither "
        "DJANGO_SECRET_KEY nor DJANGO_SECRET_KEY_FILE is set, so Django would sign sessions and "
        "CSRF tokens with the public development key. Set DJANGO_SECRET_KEY (for example the "
        "output of: python -c 'import secrets; print(secrets.token_urlsafe(50))') or "
        "DJANGO_SECRET_KEY_FILE (a file holding it); or DJANGO_DEBUG=1 on a development "
        "machine. bin/run generates one into var/secret_key."
    )


def serving_secret_key_require(process: str) -> None:
    """``secret_key_check`` on the loaded Django settings; call it when a serving process
    starts (after Django's settings are configured).

    Raises:
        InsecureSecretKey: see ``secret_key_check``.
    """
    from django.conf import settings

    secret_key_check(secret_key=settings.SECRET_KEY, debug=settings.DEBUG, process=process)


def serving_secret_key_exit(process: str) -> None:
    """``serving_secret_key_require``, ending the process with its message (exit status 1)
    instead of raising; for starts that swallow exceptions (Celery's signal handlers).

    Raises:
        SystemExit: the key is refused.
    """
    try:
        serving_secret_key_require(process)
    except InsecureSecretKey as exc:
        raise SystemExit(f"ImproperlyConfigured: {exc}") from exc

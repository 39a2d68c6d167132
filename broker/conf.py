"""Access to the broker's settings (``settings.HALFMOON_SETTINGS``), read at call time so tests
can override them with ``django.test.override_settings``."""

from __future__ import annotations

from django.conf import settings


def setting(name: str) -> int:
    """Return the broker setting ``name`` (e.g. ``"HALFMOON_TRANSACTION_CHECK_MAX"``).

    Raises:
        KeyError: no such setting.
    """
    return settings.HALFMOON_SETTINGS[name]

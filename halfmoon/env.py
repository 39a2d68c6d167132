"""Typed readers for settings that come from the environment.

Each reader fails loudly (``ImproperlyConfigured``) on a value it cannot parse or that lies
outside its bounds, so a typo in a deployment stops the process at start instead of running
with a silent default.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str) -> str:
    """Return the environment variable ``name``, or ``default`` when unset or empty."""
    value = os.environ.get(name, "")
    return value if value != "" else default


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``name`` as an int, or ``default`` when unset.

    Raises:
        ImproperlyConfigured: the value is not an integer or lies outside [minimum, maximum].
    """
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above its maximum {maximum}")
    return value


def env_bool(name: str, default: bool) -> bool:
    """Return ``name`` as a bool (1/0, true/false, yes/no, on/off), or ``default`` when unset.

    Raises:
        ImproperlyConfigured: any other value.
    """
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean")

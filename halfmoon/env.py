"""Typed readers for settings that come from the environment.

Any of them may instead come from a file: when ``NAME`` is unset, ``NAME_FILE`` names a file
holding the value (Docker and Kubernetes secrets), so a secret such as ``DJANGO_SECRET_KEY`` or
a ``DATABASE_URL`` with a password need not sit in the environment.

Each reader fails loudly (``ImproperlyConfigured``) on a value it cannot parse or that lies
outside its bounds, so a typo in a deployment stops the process at start instead of running
with a silent default.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_raw(name: str) -> str:
    """The environment variable ``name``; when it is unset or empty, the content of the file
    named by ``NAME_FILE`` (a Docker or Kubernetes secret), surrounding whitespace removed;
    "" when neither is set. ``NAME`` wins when both are set.

    Raises:
        ImproperlyConfigured: ``NAME_FILE`` names a file that cannot be read, or an empty one.
    """
    value = os.environ.get(name, "")
    if value != "":
        return value
    path = os.environ.get(f"{name}_FILE", "")
    if path == "":
        return ""
    try:
        content = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    if content == "":
        raise ImproperlyConfigured(f"{name}_FILE={path!r} is empty")
    return content


def env_str(name: str, default: str) -> str:
    """Return ``name`` (or the content of the file ``NAME_FILE`` names, see ``env_raw``), or
    ``default`` when neither is set."""
    value = env_raw(name)
    return value if value != "" else default


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``name`` (or ``NAME_FILE``'s content, see ``env_raw``) as an int, or ``default``
    when unset.

    Raises:
        ImproperlyConfigured: the value is not an integer or lies outside [minimum, maximum].
    """
    raw = env_raw(name)
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
    """Return ``name`` (or ``NAME_FILE``'s content, see ``env_raw``) as a bool (1/0,
    true/false, yes/no, on/off), or ``default`` when unset.

    Raises:
        ImproperlyConfigured: any other value.
    """
    raw = env_raw(name).strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean")

"""Path converters: a path parameter is checked against its format while the URL is resolved,
before any view or query runs, so a value that cannot name anything (a NUL byte, which
PostgreSQL refuses in text, a 500-character name) is an ordinary 404, never a database error.

- ``name``: a topic or group name, the contract's ``^[%|a-zA-Z0-9_-]{1,127}$``
  (``broker.constants.NAME_PATTERN``, RocketMQ's Validators).
- ``msgid``: a message id or transaction id (they are equal, RocketMQ's UNIQ_KEY), the format a
  client-supplied ``msg_id`` must have (``broker.constants.MSG_ID_PATTERN``); the
  broker's own ids (32 hex characters) are of that format too.
- Numeric ids keep Django's ``int``: digits only, and a number past the column's range is a
  404 (Django answers an empty result, no query error).

``broker/api/urls.py`` names them in its routes. The console's routes live in its view modules
with ``<str:...>``; ``typed_routes`` retypes them by parameter name for ``console/urls.py``, and
refuses a ``<str:...>`` or ``<path:...>`` parameter it has no format for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, path, register_converter
from django.urls.resolvers import RoutePattern

from broker.constants import MSG_ID_PATTERN, NAME_PATTERN


def _unanchored(pattern: re.Pattern[str]) -> str:
    """``^...$`` -> ``...``: a converter's regex is embedded in the route's own pattern."""
    text = pattern.pattern
    if not (text.startswith("^") and text.endswith("$")):
        raise ImproperlyConfigured(f"Expected an anchored pattern, got {text!r}")
    return text[1:-1]


class NameConverter:
    """A topic or group name (``^[%|a-zA-Z0-9_-]{1,127}$``); the view gets the ``str``."""

    regex = _unanchored(NAME_PATTERN)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class MsgIdConverter:
    """A message or transaction id (``^[A-Za-z0-9_.:-]{1,64}$``); the view gets the ``str``."""

    regex = _unanchored(MSG_ID_PATTERN)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(NameConverter, "name")
register_converter(MsgIdConverter, "msgid")

# The format of each ``<str:...>`` parameter of the console's routes, by parameter name.
PARAMETER_CONVERTERS: dict[str, str] = {
    "name": "name",
    "group": "name",
    "msg_id": "msgid",
    "transaction_id": "msgid",
    "action": "slug",
}

_UNTYPED = re.compile(r"<(?:(str|path):)?(\w+)>")


def typed_routes(
    patterns: Iterable[URLPattern | URLResolver],
) -> list[URLPattern | URLResolver]:
    """The same routes (view, default kwargs, name) with each ``<str:p>`` (or untyped ``<p>``)
    parameter given the converter ``PARAMETER_CONVERTERS[p]``.

    Raises:
        ImproperlyConfigured: a ``<str:...>``/``<path:...>``/untyped parameter whose name has no
            format in ``PARAMETER_CONVERTERS`` (a new route must say what its parameter is), or a
            route that is not a ``path()`` route.
    """
    typed: list[URLPattern | URLResolver] = []
    for pattern in patterns:
        if not isinstance(pattern, URLPattern) or not isinstance(pattern.pattern, RoutePattern):
            raise ImproperlyConfigured(f"typed_routes takes path() routes only, not {pattern!r}")
        route = str(pattern.pattern)

        def retype(match: re.Match[str], route: str = route) -> str:
            parameter = match.group(2)
            converter = PARAMETER_CONVERTERS.get(parameter)
            if converter is None:
                raise ImproperlyConfigured(
                    f"The route {route!r} has a parameter {parameter!r} of no known format: "
                    "add it to broker.converters.PARAMETER_CONVERTERS."
                )
            return f"<{converter}:{parameter}>"

        new_route = _UNTYPED.sub(retype, route)
        typed.append(path(new_route, pattern.callback, pattern.default_args, pattern.name))
    return typed

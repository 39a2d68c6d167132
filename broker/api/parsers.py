"""The API's JSON parser: bounded in size and in nesting depth.

DRF reads the raw request stream, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE does not apply;
this parser enforces it: from Content-Length before reading, and on the bytes actually read
(at most the limit plus one byte is ever read), 413 ``request_too_large`` either way.

Nesting is bounded by ``JSON_MAX_DEPTH``: a deeper document (which would otherwise exhaust the
interpreter's recursion limit in the parser, or in any code walking it) is a 400
``json_too_deep``. No valid request comes near it: a send's ``properties`` is an object of
strings (depth 2), a batch a list of such objects.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

from broker.errors import InvalidInput, TooLarge

# The deepest nesting of arrays and objects a request body may have (the top-level value is
# depth 1: {"properties": {"k": "v"}} is depth 2).
JSON_MAX_DEPTH = 32


def _too_deep() -> InvalidInput:
    return InvalidInput(
        f"The JSON body is nested more than {JSON_MAX_DEPTH} levels deep.",
        code="json_too_deep",
        details={"max_depth": JSON_MAX_DEPTH},
    )


def request_too_large(size: int | None, limit: int) -> TooLarge:
    """413 ``request_too_large`` for a body of ``size`` bytes over ``limit`` bytes; ``size``
    None when only "more than the limit" is known (the body was cut off at the limit while it
    was read). The one definition of that error: this parser raises it, and the ASGI body
    limit (``halfmoon.body_limit``) answers with it before Django runs."""
    if size is None:
        return TooLarge(
            f"The request body is more than the limit of {limit} bytes.",
            code="request_too_large",
            details={"limit": limit},
        )
    return TooLarge(
        f"The request body is {size} bytes, more than the limit of {limit} bytes.",
        code="request_too_large",
        details={"size": size, "limit": limit},
    )


def json_depth_within(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects at most ``max_depth`` deep (a
    scalar is depth 0, ``[]`` and ``{}`` depth 1). Iterative: no recursion, whatever the
    depth; stops at the first container past the bound."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


class LimitedJSONParser(JSONParser):
    """DRF's JSON parser with the body size limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``, 413) and the
    depth limit (``JSON_MAX_DEPTH``, 400) enforced; otherwise DRF's behaviour (strict JSON: no
    NaN or Infinity, malformed JSON is a ``ParseError``)."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: dict | None = None
    ) -> Any:
        """The parsed body.

        Raises:
            TooLarge: 413 ``request_too_large``, by Content-Length or by the bytes read.
            InvalidInput: 400 ``json_too_deep``.
            ParseError: malformed JSON, or a body not in its declared encoding (400).
        """
        parser_context = parser_context or {}
        request = parser_context.get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request is not None and limit is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                raise request_too_large(length, limit)
        encoding = get_encoding(parser_context)  # a text encoding only (no bz2_codec bombs)
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise request_too_large(None, limit)
        parse_constant = json.strict_constant if self.strict else None
        try:
            data = json.loads(raw.decode(encoding), parse_constant=parse_constant)
        except RecursionError:
            raise _too_deep() from None
        except ValueError as exc:  # UnicodeDecodeError included
            raise ParseError(f"JSON parse error - {exc}") from exc
        if not json_depth_within(data, JSON_MAX_DEPTH):
            raise _too_deep()
        return data

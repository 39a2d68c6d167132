"""A JSON parser that refuses oversized bodies before reading them.

DRF reads the raw request stream, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE does not apply;
this parser enforces it from Content-Length (413 ``request_too_large``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from broker.errors import TooLarge


class LimitedJSONParser(JSONParser):
    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: dict | None = None
    ) -> Any:
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request is not None and limit is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                raise TooLarge(
                    f"The request body is {length} bytes, more than the limit of {limit} bytes.",
                    code="request_too_large",
                    details={"size": length, "limit": limit},
                )
        return super().parse(stream, media_type, parser_context)

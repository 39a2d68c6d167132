"""Request ids: the id an operator greps the server log for when a client reports an error.

An error answer that is the server's fault (500, and the 503 of an unreachable database)
carries ``details.request_id`` and the header ``X-Request-ID``; the log line of the same error
(Django's ``django.request`` record, with its traceback, and the API handler's own line) names
the same id. The id is made the first time it is asked for and kept on the request, so the
error handler and the log record of one request always agree.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

REQUEST_ID_HEADER = "X-Request-ID"
_ATTRIBUTE = "halfmoon_request_id"


def request_id(request: Any) -> str:
    """The request's id: 32 lower-case hex characters (a UUID4), made on first use.

    Args:
        request: a Django ``HttpRequest`` or a DRF ``Request`` (its Django request keeps the
            id, so both views of one request share it).
    """
    django_request = getattr(request, "_request", request)
    rid = getattr(django_request, _ATTRIBUTE, None)
    if rid is None:
        rid = uuid.uuid4().hex
        # Not every ``request`` of a log record is a request object that takes attributes.
        with contextlib.suppress(AttributeError):
            setattr(django_request, _ATTRIBUTE, rid)
    return rid


class RequestIdFilter(logging.Filter):
    """A logging filter that sets ``record.request_id``: the id of the record's request (the
    ``request`` Django's ``django.request`` records carry), ``"-"`` for records of no request.
    Used by the handlers of ``LOGGING`` so their format may name ``%(request_id)s``."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if not hasattr(record, "request_id"):
            record.request_id = request_id(request) if request is not None else "-"
        return True

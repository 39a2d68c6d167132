"""Content negotiation of api-v1: DRF's, with the answer to the usual requests known ahead.

Every api-v1 answer is JSON (``JSONRenderer``, the only renderer). A client that sends no
``Accept`` header, ``*/*`` or ``application/json`` (wrk, httpx, our Python client) gets
``application/json`` from DRF's ``DefaultContentNegotiation`` only after it parses the header
into media types, orders them by precedence and matches each against the renderers, on every
request (figures in bench/README.md). Those three headers are
answered here without the parsing; every other header, and a ``?format=`` override, go through
DRF's negotiation unchanged (a 406 ``not_acceptable`` for a type the API cannot render), but
an empty ``?format=``, which is 404 as any format the resource has not (DRF ignores it).
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

_USUAL_ACCEPT = frozenset({None, "*/*", "application/json"})


class JSONFirstNegotiation(DefaultContentNegotiation):
    """DRF's ``DefaultContentNegotiation``; for a request whose ``Accept`` header is absent,
    ``*/*`` or ``application/json``, without a format override, the first renderer and its
    media type at once: what DRF's negotiation chooses for them when that renderer is
    ``application/json``."""

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: Any = None
    ) -> tuple[BaseRenderer, str]:
        """(renderer, accepted media type), as ``DefaultContentNegotiation.select_renderer``.

        Raises:
            NotAcceptable, Http404: as DRF's negotiation, for the requests it decides; Http404
                for an empty format override (``?format=``), a format no renderer has, where
                DRF would ignore it.
        """
        override = self.settings.URL_FORMAT_OVERRIDE
        if format_suffix is None and override and request.query_params.get(override) == "":
            raise Http404("An empty format is no format of this resource.")
        first = renderers[0] if renderers else None
        if (
            first is not None
            and first.media_type == "application/json"
            and format_suffix is None
            and request.META.get("HTTP_ACCEPT") in _USUAL_ACCEPT
            and not request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
        ):
            return first, first.media_type
        return super().select_renderer(request, renderers, format_suffix)

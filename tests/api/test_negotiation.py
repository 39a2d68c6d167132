"""api-v1's content negotiation (``broker.api.negotiation``) answers the usual Accept headers
without parsing them, and chooses exactly what DRF's negotiation chooses for every header."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from broker.api.negotiation import JSONFirstNegotiation

ACCEPTS = [
    None,
    "*/*",
    "application/json",
    "application/json; indent=4",
    "application/*",
    "text/html, */*;q=0.1",
    "text/html",
    "application/xml",
    "",
]


def choice(negotiation, accept: str | None, query: str = ""):
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get(f"/api/v1/topics{query}", **headers))
    try:
        renderer, media_type = negotiation.select_renderer(request, [JSONRenderer()])
    except NotAcceptable:
        return "406"
    except Http404:  # a ?format= no renderer has
        return "404"
    return type(renderer), media_type


@pytest.mark.parametrize("query", ["", "?format=json", "?format=xml"])
@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_choice_is_drfs(accept, query):
    assert choice(JSONFirstNegotiation(), accept, query) == choice(
        DefaultContentNegotiation(), accept, query
    )


def test_the_usual_headers_get_json_without_drfs_parsing(monkeypatch):
    def parsed(*_args):
        raise AssertionError("parsed")

    monkeypatch.setattr(DefaultContentNegotiation, "_get_parsed_accept_list", parsed)
    for accept in (None, "*/*", "application/json"):
        assert choice(JSONFirstNegotiation(), accept) == (JSONRenderer, "application/json")
    with pytest.raises(AssertionError, match="parsed"):
        choice(JSONFirstNegotiation(), "text/html")


@pytest.mark.parametrize("accept", ACCEPTS)
def test_an_empty_format_is_404_where_drf_ignores_it(accept):
    """``?format=`` is no format the resource has (the document's enum says so; bench/fuzz.py
    found DRF answering 200)."""
    assert choice(DefaultContentNegotiation(), "application/json", "?format=") != "404"
    assert choice(JSONFirstNegotiation(), accept, "?format=") == "404"


def test_an_empty_format_of_the_incident_export_is_the_error_body(owner):
    response = owner.post("/api/v1/incident-exports?format=", {}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"

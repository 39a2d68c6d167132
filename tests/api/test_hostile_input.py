"""Hostile input never answers 500: path parameters are
checked against their format before any query (a NUL byte, which PostgreSQL refuses in text,
used to answer 500), and JSON bodies are bounded in depth and size in the parser."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from broker.api.parsers import JSON_MAX_DEPTH, LimitedJSONParser, json_depth_within
from broker.errors import InvalidInput, TooLarge
from tests.api_helpers import assert_error, send_half
from tests.console.conftest import signed_in

# Every api-v1 route with a name or id in its path, with a body its view would accept.
END = {"producer_group": "G", "action": "commit"}
API_ROUTES = [
    ("get", "/api/v1/topics/{}", None),
    ("get", "/api/v1/producer-groups/{}", None),
    ("patch", "/api/v1/producer-groups/{}", {"check_url": None}),
    ("get", "/api/v1/producer-groups/{}/check-requests", None),
    ("post", "/api/v1/consumer-groups/{}/receive", {"topic": "TranTest"}),
    ("post", "/api/v1/consumer-groups/{}/ack", {"receipt_handles": ["x"]}),
    ("get", "/api/v1/messages/{}", None),
    ("get", "/api/v1/transactions/{}", None),
    ("post", "/api/v1/transactions/{}/end", END),
    ("get", "/api/v1/transactions/{}/timeline", None),
    ("post", "/api/v1/transactions/{}/resolve", {"action": "commit", "reason": "why"}),
    ("post", "/api/v1/transactions/{}/resume-check", {"reason": "why"}),
]

CONSOLE_ROUTES = [
    "/console/transactions/{}/",
    "/console/transactions/{}/row/",
    "/console/topics/{}/edit/",
    "/console/producer-groups/{}/edit/",
    "/console/consumer-groups/{}/edit/",
]

# Values no name or id can have: a NUL byte, a space, non-ASCII, one character too many.
IMPOSSIBLE = ["a%00b", "%00", "a%20b", "caf%C3%A9", "x" * 128]


def api_call(client, method: str, url: str, body: dict | None):
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def lenient(owner):
    """The admin key's client, answering a 500 instead of raising the view's exception."""
    owner.raise_request_exception = False
    return owner


@pytest.mark.parametrize(("method", "route", "body"), API_ROUTES)
@pytest.mark.parametrize("value", IMPOSSIBLE)
def test_an_impossible_name_or_id_in_the_path_is_a_404_in_the_contracts_body(
    lenient, topic, producer_group, consumer_group, method, route, body, value
):
    response = api_call(lenient, method, route.format(value), body)

    error = assert_error(response, 404, "not_found")
    assert error["message"].startswith("No resource at /api/v1/")


def test_an_id_one_character_too_long_is_a_404(lenient, producer_group, topic):
    response = lenient.get("/api/v1/transactions/" + "A" * 65)

    assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("/api/v1/topics/%25RETRY%25C%7Cx", "topic_not_found"),  # % and | are name characters
        ("/api/v1/producer-groups/" + "g" * 127, "producer_group_not_found"),
        ("/api/v1/transactions/AC1F.0a:b-c_d", "transaction_not_found"),
        ("/api/v1/messages/" + "F" * 64, "message_not_found"),
    ],
)
def test_every_value_of_the_format_still_reaches_its_view(lenient, url, code):
    assert_error(lenient.get(url), 404, code)


def test_a_real_transaction_is_still_found_by_its_id(producer, topic, producer_group):
    transaction_id = send_half(producer).json()["transaction_id"]

    response = producer.get(f"/api/v1/transactions/{transaction_id}")

    assert response.status_code == 200, response.content
    assert response.json()["transaction_id"] == transaction_id


def _routes(resolver: URLResolver, prefix: str = ""):
    for pattern in resolver.url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern, route)
        else:
            assert isinstance(pattern, URLPattern)
            yield route


PARAMETER = re.compile(r"<(?:(\w+):)?(\w+)>")
TYPED = {"name", "msgid", "int", "slug"}


def test_every_parameter_of_the_api_and_the_console_has_a_format():
    routes = [r for r in _routes(get_resolver()) if r.startswith(("api/", "console/"))]
    parameters = [(route, *p) for route in routes for p in PARAMETER.findall(route)]

    assert len(parameters) >= 20, parameters
    assert [p for p in parameters if p[1] not in TYPED] == []


@pytest.mark.django_db
@pytest.mark.parametrize("route", CONSOLE_ROUTES)
@pytest.mark.parametrize("value", ["a%00b", "x" * 128])
def test_an_impossible_name_or_id_in_a_console_path_is_the_consoles_404_page(route, value):
    client = Client(raise_request_exception=False)
    signed_in(client, "admin")

    response = client.get(route.format(value))

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


# --- JSON bodies ---------------------------------------------------------------------------


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep: {"a": {"a": ... 1}}."""
    return '{"a":' * depth + "1" + "}" * depth


def half_body_with_properties(properties_json: str) -> str:
    return (
        '{"producer_group": "G", "topic": "TranTest", "body": "x", "properties": '
        + properties_json
        + "}"
    )


@pytest.mark.parametrize("depth", [JSON_MAX_DEPTH, 1_000, 100_000])
def test_json_nested_deeper_than_the_bound_is_a_400(lenient, topic, producer_group, depth):
    response = lenient.post(
        "/api/v1/transactions",
        data=half_body_with_properties(nested(depth)),
        content_type="application/json",
    )

    error = assert_error(response, 400, "json_too_deep")
    assert error["details"] == {"max_depth": JSON_MAX_DEPTH}


def test_json_nested_within_the_bound_reaches_the_serializer(lenient, topic, producer_group):
    response = lenient.post(
        "/api/v1/transactions",
        data=half_body_with_properties(nested(JSON_MAX_DEPTH - 1)),
        content_type="application/json",
    )

    error = assert_error(response, 400, "invalid_input")
    assert "properties" in error["details"]["fields"]


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (1, 0),
        ("x", 0),
        ([], 1),
        ({}, 1),
        ({"a": [1, {"b": []}]}, 4),
        ({"a": [1, {"b": 2}]}, 3),
        ([[[[]]]], 4),
    ],
)
def test_the_depth_of_a_value_counts_its_containers(value, depth):
    assert json_depth_within(value, depth)
    if depth:
        assert not json_depth_within(value, depth - 1)


class _Request:
    def __init__(self, meta: dict[str, str]):
        self.META = meta


def test_a_body_longer_than_the_limit_is_refused_while_it_is_read(settings):
    """Content-Length absent (or lying): the parser reads at most the limit plus one byte."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    stream = io.BytesIO(b'{"k": "' + b"x" * 10_000 + b'"}')

    with pytest.raises(TooLarge) as refused:
        LimitedJSONParser().parse(stream, parser_context={"request": _Request({})})

    assert refused.value.code == "request_too_large"
    assert refused.value.details == {"limit": 100}
    assert stream.tell() == 101


def test_a_body_within_the_limit_is_parsed(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    parsed = LimitedJSONParser().parse(
        io.BytesIO(b'{"k": ["v", {"w": 1}]}'), parser_context={"request": _Request({})}
    )

    assert parsed == {"k": ["v", {"w": 1}]}


def test_the_parser_refuses_depth_itself():
    with pytest.raises(InvalidInput) as refused:
        LimitedJSONParser().parse(io.BytesIO(nested(JSON_MAX_DEPTH + 1).encode()))

    assert refused.value.code == "json_too_deep"


@pytest.mark.parametrize("raw", [b"[NaN]", b'{"a": 1', b"\xff\xfe", b'{"a": ' + b"9" * 5000 + b"}"])
def test_malformed_json_stays_a_400(lenient, raw):
    response = lenient.post("/api/v1/topics", data=raw, content_type="application/json")

    assert_error(response, 400, "malformed_request")

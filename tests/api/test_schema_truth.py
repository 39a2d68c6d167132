"""The OpenAPI document says what the broker does, one test per defect found:
the paginated transaction list, PATCH producer-groups' required check_url, resolve's required
reason, exactly one of body / body_base64, ack's 404, and strict JSON types (a number where a
string is due, a string where an integer or a boolean is due: 400 in the contract's body,
nothing stored)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from broker.models import ConsumerGroup, Message, Topic, Transaction
from tests.api_helpers import ack, assert_error, post, receive, send_half, send_message


@pytest.fixture
def document(anonymous) -> dict[str, Any]:
    """The OpenAPI document as ``/api/schema/`` serves it (JSON)."""
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def _component(document: dict[str, Any], ref_holder: dict[str, Any]) -> dict[str, Any]:
    ref = ref_holder["$ref"]
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _request_schema(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    body = document["paths"][path][method]["requestBody"]["content"]["application/json"]
    return _component(document, body["schema"])


# --- The list of transactions is paginated --------------------------------------------------------


def test_the_transaction_list_is_documented_as_the_page_it_answers(
    document, owner, producer, topic, producer_group
):
    send_half(producer)
    operation = document["paths"]["/api/v1/transactions"]["get"]
    page = _component(
        document, operation["responses"]["200"]["content"]["application/json"]["schema"]
    )
    assert page["type"] == "object"
    assert set(page["required"]) == {"count", "results"}
    assert page["properties"]["results"]["type"] == "array"
    assert {p["name"] for p in operation["parameters"]} >= {"page", "page_size"}
    assert "404" in operation["responses"]

    answer = owner.get("/api/v1/transactions").json()

    assert set(answer) == {"count", "next", "previous", "results"}
    assert answer["count"] == 1


@pytest.mark.parametrize("query", ["page_size=abc", "page_size=0", "page_size=1001", "page=0"])
def test_a_malformed_page_parameter_is_refused(owner, query):
    assert_error(owner.get(f"/api/v1/transactions?{query}"), 400, "invalid_input")


def test_a_page_past_the_last_is_the_documented_404(owner):
    assert_error(owner.get("/api/v1/transactions?page=2"), 404, "not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/transactions?topic=",
        "/api/v1/transactions?page_size=",
        "/api/v1/transactions?page=",
        "/api/v1/message-search?limit=",
        "/api/v1/alerts?limit=",
        "/api/v1/reconciliation/runs?limit=",
    ],
)
def test_an_empty_query_parameter_is_refused_not_ignored(owner, path):
    """As the schema says (an integer, a name): ``?page_size=`` is no integer; DRF alone
    would read it as left out and answer 200 (bench/fuzz.py found it)."""
    error = assert_error(owner.get(path), 400, "invalid_input")
    assert list(error["details"]["fields"]) == [path.split("?")[1].rstrip("=")]


# --- PATCH producer-groups requires check_url -------------------------------------------------


def test_patch_producer_group_documents_check_url_as_required(document, owner, producer_group):
    schema = _request_schema(document, "/api/v1/producer-groups/{name}", "patch")
    assert schema["required"] == ["check_url"]

    error = assert_error(owner.patch("/api/v1/producer-groups/G", {}, format="json"), 400)
    assert "check_url" in error["details"]["fields"]


# --- resolve requires a reason ---------------------------------------------------------------


def test_resolve_documents_reason_as_required_and_not_blank(document, owner):
    schema = _request_schema(document, "/api/v1/transactions/{transaction_id}/resolve", "post")
    assert set(schema["required"]) == {"action", "reason"}
    reason = schema["properties"]["reason"]
    assert reason["minLength"] == 1
    assert "pattern" in reason  # something besides whitespace


def test_the_reason_pattern_calls_blank_what_the_service_strips(document):
    """The pattern names the characters ``str.strip()`` removes (``\\s`` means others to JSON
    Schema's ECMA-262 regexes: U+001F and U+0085 were schema-valid blank reasons, refused
    ``reason_required``; bench/fuzz.py found it)."""
    schema = _request_schema(document, "/api/v1/transactions/{transaction_id}/resolve", "post")
    pattern = schema["properties"]["reason"]["pattern"]
    assert "\\s" not in pattern
    blanks = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    assert len(blanks) == 29
    assert not [c for c in blanks if re.fullmatch(pattern, c * 2)]
    assert re.fullmatch(pattern, "\ufeff") and re.fullmatch(pattern, " why ")


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_resolve_without_a_reason_is_refused(owner, producer, topic, producer_group, reason):
    transaction_id = send_half(producer).json()["transaction_id"]
    body: dict[str, Any] = {"action": "commit"}
    if reason is not None:
        body["reason"] = reason

    assert_error(post(owner, f"/api/v1/transactions/{transaction_id}/resolve", body), 400)

    assert Transaction.objects.get(transaction_id=transaction_id).state == "PREPARED"


# --- Exactly one of body or body_base64 --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("/api/v1/messages", "MessageSendInRequest"),
        ("/api/v1/transactions", "TransactionPrepareInRequest"),
    ],
)
def test_exactly_one_body_is_in_the_schema(document, path, component):
    schema = _request_schema(document, path, "post")
    assert schema is document["components"]["schemas"][component]
    assert schema["oneOf"] == [{"required": ["body"]}, {"required": ["body_base64"]}]
    assert schema["properties"]["body_base64"]["format"] == "byte"
    assert "body" not in schema["required"] and "body_base64" not in schema["required"]


@pytest.mark.parametrize(
    "bodies", [{}, {"body": "x", "body_base64": "eA=="}], ids=["neither", "both"]
)
def test_none_or_both_bodies_are_refused(producer, topic, producer_group, bodies):
    response = post(
        producer, "/api/v1/transactions", {"producer_group": "G", "topic": "TranTest", **bodies}
    )
    assert_error(response, 400, "invalid_input")
    assert not Transaction.objects.exists()


# --- ack's 404 ------------------------------------------------------------------------------


def test_ack_documents_and_answers_404_for_an_unknown_consumer_group(document, owner):
    responses = document["paths"]["/api/v1/consumer-groups/{group}/ack"]["post"]["responses"]
    assert "404" in responses
    assert (
        _component(document, responses["404"]["content"]["application/json"]["schema"])
        == (document["components"]["schemas"]["ErrorOut"])
    )

    assert_error(ack(owner, ["x"], group="Nobody"), 404, "consumer_group_not_found")


def test_every_error_answer_is_documented_with_the_error_body(document):
    for path, operations in document["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (path, method)


# --- Strict types -----------------------------------------------------------------------------


def test_a_number_as_a_name_is_refused_not_turned_into_a_string(owner):
    error = assert_error(post(owner, "/api/v1/topics", {"name": 0, "queue_nums": 4}), 400)
    assert error["code"] == "invalid_input"
    assert error["details"]["fields"]["name"] == ["Not a valid string."]
    assert not Topic.objects.filter(name="0").exists()


@pytest.mark.parametrize("value", [5, 1.5, True, None, ["a"]])
def test_a_property_value_that_is_not_a_string_is_refused(producer, topic, producer_group, value):
    error = assert_error(send_message(producer, properties={"p": value}), 400, "invalid_input")
    assert "properties" in error["details"]["fields"]
    assert not Message.objects.filter(topic="TranTest").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("tags", 7), ("keys", False), ("body", 12), ("body", {"a": 1})],
)
def test_a_non_string_message_field_is_refused(producer, topic, producer_group, field, value):
    response = send_half(producer, **{field: value})
    error = assert_error(response, 400, "invalid_input")
    assert field in error["details"]["fields"]
    assert not Transaction.objects.exists()


@pytest.mark.parametrize("value", ["5", 5.5, True])
def test_a_string_where_an_integer_is_due_is_refused(consumer, topic, consumer_group, value):
    error = assert_error(receive(consumer, max_messages=value), 400, "invalid_input")
    assert error["details"]["fields"]["max_messages"] == ["A valid integer is required."]


def test_an_integral_number_is_an_integer(consumer, topic, consumer_group):
    assert receive(consumer, max_messages=5.0).status_code == 200


@pytest.mark.parametrize(
    ("path", "data", "field"),
    [
        ("/api/v1/topics", {"name": "T2", "queue_nums": "4"}, "queue_nums"),
        (
            "/api/v1/consumer-groups",
            {"name": "C2", "max_delivery_attempts": "3"},
            "max_delivery_attempts",
        ),
    ],
)
def test_admin_integers_are_strict(owner, path, data, field):
    error = assert_error(post(owner, path, data), 400, "invalid_input")
    assert field in error["details"]["fields"]
    assert not Topic.objects.filter(name="T2").exists()
    assert not ConsumerGroup.objects.filter(name="C2").exists()


def test_check_immunity_as_a_string_is_refused(producer, topic, producer_group):
    error = assert_error(send_half(producer, check_immunity_seconds="60"), 400, "invalid_input")
    assert "check_immunity_seconds" in error["details"]["fields"]


@pytest.mark.parametrize("value", ["true", 1, "yes"])
def test_a_boolean_is_only_true_or_false(producer, topic, producer_group, value):
    transaction_id = send_half(producer).json()["transaction_id"]
    response = post(
        producer,
        f"/api/v1/transactions/{transaction_id}/end",
        {"producer_group": "G", "action": "commit", "from_transaction_check": value},
    )
    error = assert_error(response, 400, "invalid_input")
    assert "from_transaction_check" in error["details"]["fields"]
    assert Transaction.objects.get(transaction_id=transaction_id).state == "PREPARED"


def test_strings_are_kept_as_sent(producer, topic, producer_group):
    sent = send_half(producer, tags=" padded ", keys=" k ").json()
    transaction = Transaction.objects.get(transaction_id=sent["transaction_id"])
    assert (transaction.tags, transaction.keys) == (" padded ", " k ")


def test_the_schema_says_strings_carry_no_nul(document):
    ack = document["components"]["schemas"]["AckInRequest"]["properties"]["receipt_handles"]
    assert ack["items"]["pattern"] == "^[^\\u0000]*$"
    # A string that may be blank: the pattern, or the empty string.
    tags = document["components"]["schemas"]["TransactionPrepareInRequest"]["properties"]["tags"]
    assert tags["oneOf"][0]["pattern"] == "^[^\\u0000]*$"


# --- The names the broker keeps for itself -------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name", "extra", "code"),
    [
        ("/api/v1/topics", "RMQ_SYS_MINE", {}, "system_topic"),
        ("/api/v1/topics", "%DLQ%C", {}, "system_topic"),
        ("/api/v1/topics", "TRANS_CHECK_MAX_TIME_TOPIC", {}, "system_topic"),
        ("/api/v1/producer-groups", "PID_RMQ_SYS_X", {"check_url": None}, "reserved_group"),
        ("/api/v1/consumer-groups", "CID_RMQ_SYS_", {}, "reserved_group"),
    ],
)
def test_a_reserved_name_is_documented_and_refused(document, owner, path, name, extra, code):
    """A schemathesis run found ``CID_RMQ_SYS_`` valid by the document and refused by the
    broker: the create bodies now say ``not`` the reserved names, with the rule's own pattern."""
    pattern = _request_schema(document, path, "post")["properties"]["name"]["not"]["pattern"]

    assert re.search(pattern, name)
    assert not re.search(pattern, "TranTest_RMQ_SYS_")
    assert_error(post(owner, path, {"name": name, **extra}), 400, code)


# --- Content negotiation -------------------------------------------------------------------------


def test_an_accept_header_without_json_is_the_documented_406(document, owner):
    """bench/fuzz.py found a 406 that no operation documented: every operation now lists it."""
    answer = owner.get("/api/v1/topics", HTTP_ACCEPT="text/html")

    assert_error(answer, 406, "not_acceptable")
    for path, operations in document["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if isinstance(operation, dict) and "responses" in operation:
                assert "406" in operation["responses"], f"{method.upper()} {path}"


def test_the_openapi_document_generates_without_a_warning_and_validates(tmp_path):
    """drf-spectacular's own check: no warning (an enum name collision, a field it cannot type)
    and a document valid against the OpenAPI 3 schema."""
    from django.core.management import call_command

    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
    )


# --- The operations added since the last fuzz run ------------------------------------------------


def test_a_bulk_preview_documents_its_reason_as_required(document, owner):
    """bench/fuzz.py found previews without a reason refused (400 ``reason_required``) while the
    schema called the reason optional and nullable."""
    schema = _request_schema(document, "/api/v1/bulk-actions", "post")
    assert set(schema["required"]) == {"action", "reason"}
    assert schema["properties"]["reason"]["minLength"] == 1
    assert "null" not in str(schema["properties"]["reason"].get("type"))

    body = {"action": "commit", "transaction_ids": ["X"]}
    assert_error(post(owner, "/api/v1/bulk-actions", body), 400, "reason_required")


def test_an_alert_receiver_documents_what_its_kind_requires(document, owner):
    schema = _request_schema(document, "/api/v1/alert-receivers", "post")
    webhook, email = schema["oneOf"]
    assert webhook["required"] == ["url"] and webhook["properties"]["url"]["minLength"] == 1
    assert email["required"] == ["emails"] and email["properties"]["emails"]["minItems"] == 1
    pattern = email["properties"]["emails"]["items"]["pattern"]

    post_receiver = lambda **body: post(owner, "/api/v1/alert-receivers", body)  # noqa: E731
    assert_error(post_receiver(name="w", kind="slack"), 400, "url_required")
    assert_error(post_receiver(name="e", kind="email"), 400, "emails_required")
    assert not re.search(pattern, "ops@localhost")
    address = " o'neil+ops@mail-1.example.org "
    assert re.search(pattern, address)
    created = post_receiver(name="e", kind="email", emails=[address], url="not read")
    assert created.status_code == 201, created.content
    assert created.json()["emails"] == [address.strip()]


def test_every_address_the_email_pattern_matches_is_one_the_broker_takes():
    """The document's pattern is a part of what ``validate_email`` accepts, never more: a
    schema-valid address is never refused ``invalid_email``."""
    from django.core.validators import validate_email
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from broker.api.schema import EMAIL_PATTERN

    @given(st.from_regex(EMAIL_PATTERN, fullmatch=True).filter(lambda a: len(a.strip()) <= 254))
    @settings(max_examples=300, deadline=None, database=None)
    def check(address: str) -> None:
        validate_email(address.strip())

    check()


def test_the_incident_export_documents_its_body_as_required(document, owner):
    """No field is required alone (exactly one of four), so drf-spectacular left the body
    optional; a missing body is refused as an empty one."""
    operation = document["paths"]["/api/v1/incident-exports"]["post"]
    assert operation["requestBody"]["required"] is True

    assert_error(owner.post("/api/v1/incident-exports"), 400, "invalid_input")


@pytest.mark.parametrize(
    "query", ["before=1.1&after=1.1", "start=5&end=5", "start=6&end=5"], ids=str
)
def test_the_message_search_states_its_rules_across_parameters(document, owner, query):
    description = document["paths"]["/api/v1/message-search"]["get"]["description"]
    assert "at most one of `before` and `after`" in description
    assert "`end` after `start`" in description

    assert_error(owner.get(f"/api/v1/message-search?{query}"), 400, "invalid_input")


def test_only_documented_refusals_no_schema_states_are_admitted():
    """``positive_data_acceptance_documented`` lets a schema-valid request's 400 pass only for
    the operation that documents it."""
    from tests.schema_bounds import refusal_documented

    bulk = ("POST", "/api/v1/bulk-actions")
    search = ("GET", "/api/v1/message-search")
    assert refusal_documented(*bulk, {}, {}, 400, "bulk_empty")
    assert not refusal_documented(*bulk, {}, {}, 400, "reason_required")
    assert not refusal_documented(*bulk, {}, {}, 409, "bulk_empty")
    assert not refusal_documented("POST", "/api/v1/incident-exports", {}, {}, 400, "bulk_empty")
    assert refusal_documented(*search, {"before": "1.1", "after": "1.1"}, None, 400, "x")
    assert refusal_documented(*search, {"start": 5, "end": 5}, None, 400, "invalid_input")
    assert not refusal_documented(*search, {"start": 5, "end": 6}, None, 400, "invalid_input")
    group = ("POST", "/api/v1/producer-groups")
    check_url, name = frozenset({"check_url"}), frozenset({"check_url", "name"})
    assert refusal_documented(*group, {}, {}, 400, "invalid_input", check_url)
    assert not refusal_documented(*group, {}, {}, 400, "invalid_input", name)
    assert not refusal_documented(*bulk, {}, {}, 400, "invalid_input", check_url)

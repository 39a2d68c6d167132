"""The OpenAPI document as the schemathesis runs read it (``tests/api/test_schemathesis.py``,
``bench/fuzz.py``): every long poll's ``wait_ms`` narrowed, so no generated request waits the
contract's 30 s; and the check both runs use instead of ``positive_data_acceptance``, which
admits only the documented refusals no schema can state. No Django, no database."""

from __future__ import annotations

from typing import Any

WAIT_MS_MAX = 200
"""The longest ``wait_ms`` a generated request asks for (ms)."""


def wait_ms_bounded(document: dict[str, Any], maximum: int = WAIT_MS_MAX) -> dict[str, Any]:
    """``document`` (changed in place and returned) with every ``wait_ms`` (a body property or a
    query parameter's schema) at most ``maximum`` ms."""

    def narrow(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if (
                    key == "wait_ms"
                    and isinstance(value, dict)
                    and "maximum" in value
                    or key == "schema"
                    and node.get("name") == "wait_ms"
                ):
                    value["maximum"] = maximum
                narrow(value)
        elif isinstance(node, list):
            for item in node:
                narrow(item)

    narrow(document)
    return document


STATE_REFUSALS: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/api/v1/producer-groups"): frozenset({"check_url_not_allowed"}),
    ("PATCH", "/api/v1/producer-groups/{name}"): frozenset({"check_url_not_allowed"}),
    ("PATCH", "/api/v1/topics/{name}"): frozenset({"invalid_queue_nums"}),
    ("POST", "/api/v1/alert-receivers"): frozenset({"webhook_url_not_allowed"}),
    ("PATCH", "/api/v1/alert-receivers/{name}"): frozenset(
        {"webhook_url_not_allowed", "url_required", "emails_required", "invalid_email"}
    ),
    ("POST", "/api/v1/bulk-actions"): frozenset({"bulk_empty", "bulk_too_large"}),
    ("POST", "/api/v1/incident-exports"): frozenset({"export_empty", "export_too_large"}),
    ("POST", "/api/v1/consumer-groups/{group}/offset-resets"): frozenset({"no_offsets"}),
    ("POST", "/api/v1/consumer-groups/{group}/skip-backlog"): frozenset({"no_offsets"}),
    ("POST", "/api/v1/consumer-groups/{group}/dead-letter-resends"): frozenset(
        {"dead_letters_empty", "dead_letters_too_many"}
    ),
    ("POST", "/api/v1/consumer-groups/{group}/receive"): frozenset({"illegal_filter_expression"}),
    ("POST", "/api/v1/messages"): frozenset({"illegal_delivery_time", "message_type_mismatch"}),
    ("POST", "/api/v1/transactions"): frozenset({"message_type_mismatch"}),
    ("POST", "/api/v1/scheduled-messages/recall"): frozenset({"invalid_recall_handle"}),
}
"""The 400 codes (by operation) that depend on what no schema can state: a deployment setting
(the allowed networks of a ``check_url`` or a webhook ``url``, its DNS), the database (nothing
to change or export, too much, no offsets yet, a topic's current queue count or message type,
a receiver's stored kind), a language (a receive's SQL92 filter, RocketMQ's grammar), the clock (a delivery
time more than HALFMOON_TIMER_MAX_DELAY_SEC ahead), an encoded content (a recall handle that
decodes to no message of the topic). Each is named in its operation's description; a schema-valid request answered
one of them is not a schema violation."""


def _message_search_rule_broken(query: dict[str, Any], body: Any) -> bool:
    """``GET /api/v1/message-search``: at most one of ``before`` and ``after``, and ``end``
    after ``start`` (rules across query parameters, which OpenAPI cannot state)."""
    if "before" in query and "after" in query:
        return True
    start, end = query.get("start"), query.get("end")
    try:
        return start is not None and end is not None and int(end) <= int(start)
    except (TypeError, ValueError):
        return False


FIELD_REFUSALS: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/api/v1/producer-groups"): frozenset({"check_url"}),
    ("PATCH", "/api/v1/producer-groups/{name}"): frozenset({"check_url"}),
}
"""Fields whose 400 ``invalid_input`` a schema states only in part: a ``check_url`` passes
Django's ``URLValidator`` (host name and label lengths among its rules), of which ``format:
uri`` says the form only."""

CROSS_PARAMETER_RULES = {("GET", "/api/v1/message-search"): _message_search_rule_broken}
"""Rules across query parameters, by operation: true when a case breaks the rule (its
operation's description states it; the answer is 400 ``invalid_input``)."""


def refusal_documented(
    method: str,
    path: str,
    query: dict[str, Any] | None,
    body: Any,
    status: int,
    code: str,
    fields: frozenset[str] = frozenset(),
) -> bool:
    """Whether a 400 with error ``code`` (``fields``: the fields its details name) to a
    schema-valid request of ``method path`` (the document's path template) is one no schema
    can state: a ``STATE_REFUSALS`` code, an ``invalid_input`` naming only
    ``FIELD_REFUSALS`` fields, or a case that breaks a ``CROSS_PARAMETER_RULES`` rule."""
    if status != 400:
        return False
    key = (method.upper(), path)
    if code in STATE_REFUSALS.get(key, ()):
        return True
    if code == "invalid_input" and fields and fields <= FIELD_REFUSALS.get(key, frozenset()):
        return True
    rule = CROSS_PARAMETER_RULES.get(key)
    return rule is not None and rule(query or {}, body)


def positive_data_acceptance_documented(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's ``positive_data_acceptance``, except for the refusals
    ``refusal_documented`` admits: every other 400 to a schema-valid request still fails."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    try:
        error = response.json()["error"]
        code = str(error["code"])
        fields = frozenset((error.get("details") or {}).get("fields") or ())
    except Exception:  # noqa: BLE001 - not the error body: judged by the check itself
        code, fields = "", frozenset()
    query = case.query if isinstance(case.query, dict) else {}
    if refusal_documented(
        case.method, case.operation.path, query, case.body, response.status_code, code, fields
    ):
        return None
    return positive_data_acceptance(ctx, response, case)


def generator_document(document: dict[str, Any]) -> dict[str, Any]:
    """The document as the schemathesis runs read it: ``wait_ms_bounded``."""
    return wait_ms_bounded(document)

"""api-v1 Operations and conventions: /healthz, /metrics, /api/schema/, /api/docs/, and the
error body of every failure (unknown URLs, malformed JSON, wrong methods): JSON, never HTML."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from broker.api import urls as api_urls
from broker.models import Transaction
from broker.services.topology.writes import producer_group_create
from tests.api_helpers import ERROR_KEYS, assert_error, end, post, send_half
from tests.conftest import client_for
from tests.support import CheckServer, due_at, prepare, round_for

# --- /healthz ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_answers_ok_when_the_database_and_redis_answer(anonymous):
    response = anonymous.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["status"] == "ok"


@pytest.mark.django_db
def test_healthz_answers_503_when_redis_does_not_answer(anonymous, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"

    response = anonymous.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] != "ok"
    assert set(body["error"]) == ERROR_KEYS
    assert body["error"]["code"] == "unavailable"
    assert body["error"]["details"]["database"] == "ok"
    assert body["error"]["details"]["redis"] != "ok"


# --- /metrics ------------------------------------------------------------------------------------


def samples(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_are_prometheus_text_reflecting_transactions(
    anonymous, owner, topic, producer_group
):
    topic_label = (("topic", "TranTest"),)
    assert ("rocketmq_half_messages", topic_label) not in samples(anonymous)

    ids = [send_half(owner).json()["transaction_id"] for _ in range(4)]
    assert samples(anonymous)[("rocketmq_half_messages", topic_label)] == 4

    end(owner, ids[0], "commit")
    end(owner, ids[1], "commit")
    end(owner, ids[2], "rollback")
    after = samples(anonymous)
    assert after[("rocketmq_half_messages", topic_label)] == 1
    assert after[("rocketmq_commit_messages_total", topic_label)] == 2
    assert after[("rocketmq_rollback_messages_total", topic_label)] == 1
    assert after[("rocketmq_finish_message_latency_count", topic_label)] == 3
    assert after[("rocketmq_finish_message_latency_bucket", (("le", "+Inf"), *topic_label))] == 3


@pytest.mark.django_db
def test_metrics_name_the_check_counters_from_the_start(anonymous):
    found = samples(anonymous)

    for outcome in ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW", "TIMEOUT", "UNDELIVERED"):
        assert found[("halfmoon_checks_total", (("outcome", outcome),))] == 0
    assert found[("halfmoon_discarded_total", (("reason", "check_max"),))] == 0
    assert found[("halfmoon_discarded_total", (("reason", "file_reserved_time"),))] == 0


# --- /api/schema/ and /api/docs/ -----------------------------------------------------------------


def api_v1_paths() -> set[str]:
    """Every path of broker.api.urls, as OpenAPI spells it: /api/v1/topics/{name}."""
    return {
        "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))
        for pattern in api_urls.urlpatterns
    }


@pytest.fixture
def schema(anonymous, db) -> dict:
    response = anonymous.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def test_the_schema_is_an_openapi_3_document(anonymous, db):
    response = anonymous.get("/api/schema/")

    assert response.status_code == 200
    assert response.content.startswith(b"openapi: 3.")


def test_the_schema_lists_every_api_v1_path_with_its_methods(schema):
    assert schema["openapi"].startswith("3.")
    assert api_v1_paths() <= set(schema["paths"])
    # api-v1's 20 (the reconciliation runs and the three batches included), the timeline, the
    # two alert-rules paths, the list of reconciliation runs, the producer and consumer groups'
    # gRPC clients, a delivery's change-invisible-duration and dead-letter, the two check
    # explanations, the five alert-receivers and alert-silences paths, the four of alerts and
    # their notifications, a transaction's check-now, a consumer group, the four bulk-actions
    # paths, the message search, a message's deliveries, the incident export, the eleven
    # consumer-group operations' paths, the broker settings, a consumer group's subscriptions
    # and the four scheduled-messages paths (list, detail, the producer's recall, the
    # operator's recall), a FIFO group's blocked message groups and the dead-letter of a
    # blocked head (docs/api.md)
    assert len(api_v1_paths()) == 67
    methods = {path: set(ops) - {"parameters"} for path, ops in schema["paths"].items()}
    assert methods["/api/v1/topics"] == {"get", "post"}
    assert methods["/api/v1/producer-groups/{name}"] == {"get", "patch"}
    assert methods["/api/v1/transactions"] == {"get", "post"}
    assert methods["/api/v1/transactions/{transaction_id}/end"] == {"post"}
    assert methods["/api/v1/transactions/{transaction_id}/timeline"] == {"get"}
    assert methods["/api/v1/reconciliation/runs"] == {"get", "post"}
    assert methods["/api/v1/reconciliation/runs/latest"] == {"get"}
    assert methods["/api/v1/reconciliation/runs/{run_id}"] == {"get"}
    assert methods["/api/v1/transactions/{transaction_id}/resolve"] == {"post"}
    assert methods["/api/v1/transactions/{transaction_id}/resume-check"] == {"post"}
    assert methods["/api/v1/consumer-groups/{group}/receive"] == {"post"}
    assert methods["/api/v1/consumer-groups/{name}/subscriptions"] == {"get"}
    assert methods["/api/v1/consumer-groups/{group}/blocked-message-groups"] == {"get"}
    blocked_head = "/api/v1/consumer-groups/{group}/blocked-message-groups/dead-letter-head"
    assert methods[blocked_head] == {"post"}
    assert methods["/api/v1/alert-rules"] == {"get", "post"}
    assert methods["/api/v1/alert-rules/{name}"] == {"get", "patch", "delete"}


def test_the_schema_names_the_error_answers(schema):
    end_responses = schema["paths"]["/api/v1/transactions/{transaction_id}/end"]["post"][
        "responses"
    ]
    send_responses = schema["paths"]["/api/v1/messages"]["post"]["responses"]

    assert {"200", "400", "401", "403", "404", "409"} <= set(end_responses)
    assert {"201", "413"} <= set(send_responses)


def test_the_schema_declares_bearer_access_keys(schema):
    schemes = schema["components"]["securitySchemes"]

    assert [s["scheme"] for s in schemes.values() if s["type"] == "http"] == ["bearer"]
    topics = schema["paths"]["/api/v1/topics"]["get"]
    assert topics["security"] == [{name: []} for name in schemes]


def test_the_docs_page_loads_only_local_assets(anonymous, db):
    response = anonymous.get("/api/docs/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert assets, html
    for url in assets:
        assert url.startswith("/static/"), url
        assert finders.find(url.removeprefix("/static/")), f"{url} is not a static file"
    assert not re.search(r"""(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}""", html, re.IGNORECASE)
    assert "/api/schema/" in html


# --- Error bodies: JSON, never HTML --------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/nope",
        "/api/v1/topics/",
        "/api/v1/transactions/X/nope",
        "/api/v2/topics",
        "/api/nope",
        "/nope",
    ],
)
def test_an_unknown_url_answers_a_json_404(anonymous, owner, url):
    for client in (anonymous, owner):
        assert_error(client.get(url), 404, "not_found")
        assert_error(client.post(url, {}, format="json"), 404, "not_found")


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/topics",
        "/api/v1/producer-groups",
        "/api/v1/consumer-groups",
        "/api/v1/messages",
        "/api/v1/transactions",
        "/api/v1/transactions/X/end",
    ],
)
def test_malformed_json_answers_400_in_the_error_body(owner, url):
    response = owner.post(url, data='{"name": "TranTest", ', content_type="application/json")

    assert_error(response, 400, "malformed_request")


@pytest.mark.parametrize("payload", ["[1, 2]", "null", '"text"', "42"])
def test_json_that_is_not_an_object_is_invalid_input(owner, payload):
    response = owner.post("/api/v1/topics", data=payload, content_type="application/json")

    assert_error(response, 400, "invalid_input")


def test_a_body_that_is_not_json_is_refused_in_the_error_body(owner):
    response = owner.post(
        "/api/v1/topics", data="name=TranTest", content_type="application/x-www-form-urlencoded"
    )

    assert_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("delete", "/api/v1/topics"),
        ("put", "/api/v1/topics/TranTest"),
        ("delete", "/api/v1/producer-groups/G"),
        ("get", "/api/v1/consumer-groups/C/receive"),
        ("get", "/api/v1/consumer-groups/C/ack"),
        ("patch", "/api/v1/messages"),
        ("delete", "/api/v1/messages/X"),
        ("put", "/api/v1/transactions"),
        ("delete", "/api/v1/transactions/X"),
        ("get", "/api/v1/transactions/X/end"),
        ("post", "/api/v1/producer-groups/G/check-requests"),
    ],
)
def test_a_wrong_method_answers_405_in_the_error_body(owner, method, url):
    response = getattr(owner, method)(url)

    assert_error(response, 405, "method_not_allowed")


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/healthz", "/metrics", "/api/schema/", "/api/docs/"])
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_a_wrong_method_on_an_operations_endpoint_answers_405_in_the_error_body(url, method):
    client = Client(enforce_csrf_checks=True)

    response = getattr(client, method)(url)

    assert_error(response, 405, "method_not_allowed")


def test_a_page_the_list_does_not_have_is_a_json_404(owner):
    assert_error(owner.get("/api/v1/transactions?page=2"), 404, "not_found")


# --- Every error path: exactly {"error": {"code", "message", "details"}} -------------------------


ERROR_PATHS = [
    # (person, method, url, data, status)
    ("anonymous", "get", "/api/v1/topics", None, 401),
    ("stranger", "get", "/api/v1/transactions", None, 401),
    ("producer", "post", "/api/v1/topics", {"name": "X"}, 403),
    (
        "consumer",
        "post",
        "/api/v1/transactions",
        {"producer_group": "G", "topic": "TranTest", "body": "x"},
        403,
    ),
    (
        "producer",
        "post",
        "/api/v1/transactions/TX1/end",
        {"producer_group": "H", "action": "commit"},
        403,
    ),
    (
        "owner",
        "post",
        "/api/v1/transactions/TX1/end",
        {"producer_group": "H", "action": "commit"},
        403,
    ),
    ("owner", "post", "/api/v1/topics", {"name": "bad name"}, 400),
    ("owner", "post", "/api/v1/topics", {"name": "RMQ_SYS_X"}, 400),
    ("owner", "post", "/api/v1/messages", {"topic": "TranTest"}, 400),
    (
        "owner",
        "post",
        "/api/v1/messages",
        {"topic": "TranTest", "body": "x", "properties": {"UNIQ_KEY": "x"}},
        400,
    ),
    (
        "owner",
        "post",
        "/api/v1/transactions",
        {"producer_group": "G", "topic": "TranTest", "body": "x", "check_immunity_seconds": 3601},
        400,
    ),
    (
        "owner",
        "post",
        "/api/v1/transactions/TX1/end",
        {"producer_group": "G", "action": "nope"},
        400,
    ),
    (
        "owner",
        "post",
        "/api/v1/consumer-groups/C/receive",
        {"topic": "TranTest", "max_messages": 33},
        400,
    ),
    ("owner", "post", "/api/v1/consumer-groups/C/ack", {"receipt_handles": []}, 400),
    ("owner", "get", "/api/v1/producer-groups/G/check-requests?wait_ms=30001", None, 400),
    ("owner", "get", "/api/v1/transactions?state=nope", None, 400),
    ("owner", "get", "/api/v1/topics/Nope", None, 404),
    ("owner", "get", "/api/v1/producer-groups/Nope", None, 404),
    ("owner", "get", "/api/v1/messages/Nope", None, 404),
    ("owner", "get", "/api/v1/transactions/Nope", None, 404),
    (
        "owner",
        "post",
        "/api/v1/transactions/Nope/end",
        {"producer_group": "G", "action": "commit"},
        404,
    ),
    ("owner", "post", "/api/v1/messages", {"topic": "Nope", "body": "x"}, 404),
    ("owner", "post", "/api/v1/consumer-groups/Nope/receive", {"topic": "TranTest"}, 404),
    ("owner", "get", "/api/v1/producer-groups/Nope/check-requests", None, 404),
    ("owner", "post", "/api/v1/topics", {"name": "TranTest"}, 409),
    ("owner", "post", "/api/v1/producer-groups", {"name": "G"}, 409),
    ("owner", "post", "/api/v1/consumer-groups", {"name": "C"}, 409),
    (
        "owner",
        "post",
        "/api/v1/transactions/TX1/end",
        {"producer_group": "G", "action": "rollback"},
        409,
    ),
    (
        "owner",
        "post",
        "/api/v1/transactions",
        {"producer_group": "H", "topic": "TranTest", "body": "x", "msg_id": "TX1"},
        409,
    ),
    ("owner", "post", "/api/v1/messages", {"topic": "TranTest", "body": "x" * 65}, 413),
    (
        "owner",
        "post",
        "/api/v1/messages",
        {"topic": "TranTest", "body": "x", "properties": {"k": "v" * 64}},
        413,
    ),
    ("owner", "delete", "/api/v1/topics", None, 405),
    ("owner", "get", "/api/v1/nope", None, 404),
]


@pytest.mark.parametrize(("person", "method", "url", "data", "status"), ERROR_PATHS)
def test_every_error_path_answers_exactly_the_contracts_error_body(
    request,
    owner,
    topic,
    producer_group,
    consumer_group,
    broker_settings,
    person,
    method,
    url,
    data,
    status,
):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 64
    broker_settings["HALFMOON_MAX_PROPERTIES_SIZE"] = 64
    producer_group_create(name="H", check_url=None)
    send_half(owner, msg_id="TX1")
    end(owner, "TX1", "commit")
    client = client_for("hm_unknown") if person == "stranger" else request.getfixturevalue(person)

    if method == "get":
        response = client.get(url)
    else:
        response = getattr(client, method)(url, data, format="json")

    assert_error(response, status)


def test_a_post_without_a_body_is_invalid_input(owner):
    error = assert_error(post(owner, "/api/v1/topics", None), 400, "invalid_input")

    assert "name" in error["details"]["fields"]


@pytest.mark.django_db
def test_metrics_count_checks_by_the_producers_answer_and_discards_by_reason(
    anonymous, owner, topic, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 1
    with CheckServer() as server:  # answers UNKNOW
        producer_group_create(name="G", check_url=server.url)
        tx = prepare()
        round_for(tx, due_at(tx))  # one check, answered UNKNOW
        tx.refresh_from_db()
        round_for(tx, tx.next_check_timestamp)  # check max reached: discarded
    assert Transaction.objects.get(pk=tx.pk).state == "DISCARDED"
    found = samples(anonymous)
    assert found[("halfmoon_checks_total", (("outcome", "UNKNOW"),))] == 1
    assert found[("halfmoon_discarded_total", (("reason", "check_max"),))] == 1

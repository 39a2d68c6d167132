"""The OpenAPI document is the truth: schemathesis generates requests for
every operation of ``/api/schema/`` (a test fails when one is left out) and calls the app
in-process (WSGI, the real PostgreSQL and Redis of the tests) with an admin key, every check
enabled: no server error, status codes, content types, headers and bodies as documented,
schema-valid input accepted (but the documented refusals no schema can state,
``tests.schema_bounds.refusal_documented``), schema-invalid input refused, and an
unauthenticated call refused.

Bounded for CI: ``MAX_EXAMPLES`` generated cases per operation (plus schemathesis's explicit
and coverage cases), and the long polls' ``wait_ms`` narrowed to ``WAIT_MS_MAX`` in the
document the generator reads (only there: the app's bound stays 30,000). Seed data (a topic,
producer and consumer groups, a half message, a delay message, an alert rule) and a hook that
sometimes puts their names in the path let the operations reach their logic instead of
answering 404 only.
``bench/fuzz.py`` runs the same against a running broker for 10,000 requests.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance

from broker.models import AccessKey
from broker.rules.clock import now_ms
from broker.services.alerts.rules import alert_rule_create
from broker.services.timers.schedule import message_send_at
from broker.services.topology.writes import (
    TOKEN_PREFIX,
    access_key_create,
    consumer_group_create,
    producer_group_create,
    token_hash,
    topic_create,
)
from broker.services.transactions.half import transaction_prepare
from tests.schema_bounds import generator_document, positive_data_acceptance_documented

MAX_EXAMPLES = 10
TOPIC, PRODUCER_GROUP, CONSUMER_GROUP, TRANSACTION_ID = "TranTest", "G", "C", "FUZZ-TX-1"
SCHEDULED_ID = "FUZZ-DELAY-1"
ALERT_RULE = "stuck"
SEEDED_PATH_VALUES = {
    "/api/v1/topics/{name}": {"name": TOPIC},
    "/api/v1/producer-groups/{name}": {"name": PRODUCER_GROUP},
    "/api/v1/producer-groups/{name}/check-requests": {"name": PRODUCER_GROUP},
    "/api/v1/consumer-groups/{group}/receive": {"group": CONSUMER_GROUP},
    "/api/v1/consumer-groups/{group}/ack": {"group": CONSUMER_GROUP},
    "/api/v1/messages/{msg_id}": {"msg_id": TRANSACTION_ID},
    "/api/v1/alert-rules/{name}": {"name": ALERT_RULE},
    "/api/v1/scheduled-messages/{msg_id}": {"msg_id": SCHEDULED_ID},
    "/api/v1/scheduled-messages/{msg_id}/recall": {"msg_id": SCHEDULED_ID},
}


def bounded_document() -> dict[str, Any]:
    """The app's OpenAPI document (as ``/api/schema/`` serves it) with every ``wait_ms``
    bounded by ``WAIT_MS_MAX``, so no generated long poll waits 30 s."""
    document = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))

    return generator_document(document)


@pytest.fixture
def admin_token(db) -> Iterator[str]:
    """An admin key's token, and the seed data the operations act on. While the test runs,
    requests do not close the database connection (as Django's test client): the test's
    data live in its transaction."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    topic_create(name=TOPIC, queue_nums=2)
    producer_group_create(name=PRODUCER_GROUP, check_url=None)
    consumer_group_create(name=CONSUMER_GROUP, max_delivery_attempts=3)
    alert_rule_create(name=ALERT_RULE, kind="oldest_pending", group=PRODUCER_GROUP)
    transaction_prepare(
        producer_group=PRODUCER_GROUP,
        topic=TOPIC,
        tags="",
        keys="k",
        body=b"seed",
        body_is_text=True,
        properties={},
        msg_id=TRANSACTION_ID,
    )
    message_send_at(
        delivery_timestamp=now_ms() + 3_600_000,
        topic=TOPIC,
        body=b"seed",
        msg_id=SCHEDULED_ID,
        producer_group=PRODUCER_GROUP,
    )
    key, _ = access_key_create(name="fuzz-admin", is_admin=True)
    AccessKey.objects.filter(pk=key.pk).update(
        token_hash=token_hash(FUZZ_TOKEN), token_prefix=FUZZ_TOKEN[:10]
    )
    try:
        yield FUZZ_TOKEN
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


FUZZ_TOKEN = TOKEN_PREFIX + secrets.token_urlsafe(32)
"""The admin key's token, known before the key exists: schemathesis's own auth sends it (so
its negative cases may remove it and ``ignored_auth`` may leave it out)."""

DOCUMENT = bounded_document()
schema = schemathesis.openapi.from_dict(
    DOCUMENT,
    config=SchemathesisConfig.from_dict(
        {"auth": {"openapi": {"accessKey": {"bearer": FUZZ_TOKEN}}}}
    ),
)
schema.app = get_wsgi_application()  # calls go to the app in-process, through WSGI


def _path_patterns(path: str) -> dict[str, str]:
    """The documented ``pattern`` of each path parameter of ``path`` (none: any string)."""
    found: dict[str, str] = {}
    for operation in DOCUMENT["paths"].get(path, {}).values():
        for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
            if parameter["in"] == "path" and "pattern" in parameter["schema"]:
                found[parameter["name"]] = parameter["schema"]["pattern"]
    return found


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any]) -> Any:
    """Half of the cases name the seeded topic, group or transaction in the path, when the
    generated values were valid ones (a negative case's invalid path stays as generated)."""
    path = context.operation.path if context.operation else ""
    seeded = {
        **SEEDED_PATH_VALUES.get(path, {}),
        **({"transaction_id": TRANSACTION_ID} if "{transaction_id}" in path else {}),
    }
    patterns = _path_patterns(path)
    valid = all(
        isinstance(path_parameters.get(name), str)
        and re.search(patterns.get(name, ""), path_parameters[name])
        for name in seeded
    )
    if not seeded or not valid:
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, {**path_parameters, **seeded}])


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    # The same examples on every run, so CI is repeatable; bench/fuzz.py explores at random.
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_behaves_as_documented(case: Any, admin_token: str) -> None:
    """Every check; ``positive_data_acceptance`` as ``positive_data_acceptance_documented``,
    which admits only the refusals no schema can state (``tests.schema_bounds``)."""
    case.call_and_validate(
        excluded_checks=[positive_data_acceptance],
        additional_checks=[positive_data_acceptance_documented],
    )


def _document_operations() -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, operations in DOCUMENT["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    }


def test_the_run_covers_every_operation_of_the_schema(request) -> None:
    """The parametrized test above has one item per operation of the document, no more, no
    fewer (re-collected here, whatever ``-k`` selected): an operation added without coverage,
    or one schemathesis cannot read, fails here."""
    (collector,) = [
        node
        for node in request.node.parent.collect()
        if node.name == test_every_operation_behaves_as_documented.__name__
    ]
    fuzzed = [item.operation_label for item in collector.collect()]
    assert len(fuzzed) == len(set(fuzzed))
    assert set(fuzzed) == _document_operations()
    assert len(fuzzed) > 70

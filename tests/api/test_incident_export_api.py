"""``POST /api/v1/incident-exports``: the zip for a selection or a filter, with an access key's
rights (an admin key any transaction, a producer or operator key its groups' only) and the
contract's error body for a bad request, whatever the request accepts."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from broker.services.topology.writes import producer_group_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, post
from tests.support import prepare

URL = "/api/v1/incident-exports"


@pytest.fixture
def groups(topic):
    producer_group_create(name="G", check_url=None)
    producer_group_create(name="payments", check_url=None)


def unzip(response) -> dict[str, object]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="halfmoon-incident-')
    body = b"".join(response.streaming_content)
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        return {n: json.loads(zf.read(n)) for n in zf.namelist() if n.endswith(".json")}


def test_an_admin_exports_a_selection_and_a_filter(owner, groups):
    mine, theirs = prepare(producer_group="G"), prepare(producer_group="payments")

    selected = unzip(post(owner, URL, {"transaction_ids": [mine.pk]}))
    stuck = unzip(
        owner.post(
            URL, {"stuck": {"states": ["PREPARED"]}}, format="json", HTTP_ACCEPT="application/zip"
        )
    )

    assert [t["transaction_id"] for t in selected["transactions.json"]] == [mine.pk]
    assert selected["timeline.json"][0]["kind"] == "half_stored"
    assert selected["filter.json"]["made_by"] == "operator:owner"
    assert {t["transaction_id"] for t in stuck["transactions.json"]} == {mine.pk, theirs.pk}


def test_a_producer_or_operator_key_exports_its_groups_only(producer, outsider, groups):
    mine, theirs = prepare(producer_group="G"), prepare(producer_group="payments")
    ops = scoped_key("payments-ops", producer=["payments"])

    own = unzip(post(producer, URL, {"stuck": {}}))
    operated = unzip(post(ops, URL, {"stuck": {}}))

    assert [t["transaction_id"] for t in own["transactions.json"]] == [mine.pk]
    assert [t["transaction_id"] for t in operated["transactions.json"]] == [theirs.pk]
    assert_error(post(producer, URL, {"transaction_ids": [theirs.pk]}), 400, "export_empty")
    assert_error(post(outsider, URL, {"stuck": {}}), 403, "permission_denied")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"transaction_ids": ["A1"], "stuck": {}},
        {"transaction_ids": []},
        {"stuck": {"states": ["COMMITTED"]}},
        {"messages": {"topic": "no/such"}},
        {"audit": {"action": "explode"}},
    ],
)
def test_a_bad_request_is_the_contracts_json_error(owner, groups, body):
    response = owner.post(URL, body, format="json", HTTP_ACCEPT="application/zip")

    assert response["Content-Type"] == "application/json"
    assert_error(response, 400, "invalid_input")

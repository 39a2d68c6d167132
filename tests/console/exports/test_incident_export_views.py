"""``/console/export/``: the incident export's download from the stuck list (its filter, or the
selected rows), a transaction's page, the message search and the audit log; for every console
user; a filter naming nothing is a 400 page saying so."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client

from broker.services.transactions.operator import transaction_check_now
from tests.console.conftest import signed_in
from tests.support import prepare

pytestmark = pytest.mark.usefixtures("topic", "producer_group")


@pytest.fixture
def viewer(db) -> Client:
    client = Client()
    signed_in(client, "viewer")
    return client


def exported(response) -> dict[str, object]:
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"] == "application/zip"
    body = b"".join(response.streaming_content)
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        return {n: json.loads(zf.read(n)) for n in zf.namelist() if n.endswith(".json")}


def ids(files: dict[str, object]) -> list[str]:
    return [t["transaction_id"] for t in files["transactions.json"]]


def test_every_page_exports_what_it_shows(viewer):
    a, b = prepare(keys="K-A"), prepare(keys="K-B")
    transaction_check_now(transaction_id=b.pk, reason="why", actor="console:ann")

    assert ids(exported(viewer.get("/console/export/", {"kind": "stuck"}))) == [a.pk, b.pk]
    assert ids(exported(viewer.get("/console/export/", {"transaction_id": a.pk}))) == [a.pk]
    by_key = viewer.get("/console/export/", {"kind": "messages", "key": "K-B"})
    assert ids(exported(by_key)) == [b.pk]
    by_actor = viewer.get("/console/export/", {"kind": "audit", "actor": "ann"})
    assert ids(exported(by_actor)) == [b.pk]


def test_an_operator_exports_the_selected_rows(db):
    client = Client()
    signed_in(client, "operator")
    a, b = prepare(), prepare()

    files = exported(
        client.post("/console/export/", {"kind": "selection", "transaction_id": [b.pk]})
    )

    assert ids(files) == [b.pk]
    assert files["filter.json"]["made_by"].startswith("console:operator-")
    assert a.pk not in json.dumps(files)


def test_nothing_to_export_is_a_400_page_that_says_why(viewer):
    refused = viewer.get("/console/export/", {"kind": "stuck", "state": "DISCARDED"})
    nothing = viewer.get("/console/export/")
    bad = viewer.get("/console/export/", {"kind": "messages", "topic": "no/such"})

    assert refused.status_code == nothing.status_code == bad.status_code == 400
    assert "No transaction matches" in refused.content.decode()
    assert "Say what to export" in nothing.content.decode()
    assert "The search is not valid" in bad.content.decode()


def test_the_pages_link_their_export(viewer):
    tx = prepare(keys="K")

    assert 'id="export-filter"' in viewer.get("/console/transactions/").content.decode()
    assert (
        'id="export-transaction"' in viewer.get(f"/console/transactions/{tx.pk}/").content.decode()
    )
    assert 'id="export-messages"' in viewer.get("/console/messages/", {"key": "K"}).content.decode()
    assert 'id="export-audit"' in viewer.get("/console/audit/").content.decode()
    assert Client().get("/console/export/", {"kind": "stuck"}).status_code == 302

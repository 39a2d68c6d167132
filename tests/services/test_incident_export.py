"""The incident export: for a selection and for each filter (the stuck list's, the message
search's, the audit log's), a zip whose files hold the transactions, their timelines, the audit
entries about them and the latest reconciliation's anomalies, JSON and CSV agreeing; bounded."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from broker.errors import InvalidInput
from broker.models import ReconciliationAnomaly, ReconciliationRun
from broker.rules.clock import now_ms
from broker.selectors import incident
from broker.selectors.incident import IncidentScope
from broker.services.operations.incident_export import incident_export_file
from broker.services.transactions.end import transaction_end
from broker.services.transactions.operator import transaction_check_now
from tests.services.test_operator import discarded
from tests.support import prepare

pytestmark = pytest.mark.usefixtures("topic", "producer_group")


def export(scope: IncidentScope) -> dict[str, object]:
    out, summary = incident_export_file(scope=scope, actor="console:ann")
    with zipfile.ZipFile(out) as zf:
        files = {name: zf.read(name).decode() for name in zf.namelist()}
    out.close()
    parsed: dict[str, object] = {"summary": summary, "names": sorted(files)}
    for name, text in files.items():
        if name.endswith(".json"):
            parsed[name] = json.loads(text)
        elif name.endswith(".csv"):
            parsed[name] = list(csv.DictReader(io.StringIO(text)))
    return parsed


def test_a_selection_holds_each_transactions_timeline_audit_and_anomalies():
    tx = prepare(keys="ORDER-7")
    other = prepare()
    transaction_check_now(transaction_id=tx.pk, reason="stuck at 3 a.m.", actor="console:ann")
    run = ReconciliationRun.objects.create(
        state=ReconciliationRun.State.SUCCEEDED, trigger="beat", spark_master="local[2]"
    )
    ReconciliationAnomaly.objects.create(run=run, kind="hanging", transaction_id=tx.pk)
    ReconciliationAnomaly.objects.create(run=run, kind="hanging", transaction_id=other.pk)

    zipped = export(IncidentScope(kind="selection", transaction_ids=(tx.pk, "NOSUCH")))

    assert zipped["names"] == [
        "README.txt",
        "anomalies.csv",
        "anomalies.json",
        "audit.csv",
        "audit.json",
        "filter.json",
        "timeline.csv",
        "timeline.json",
        "transactions.csv",
        "transactions.json",
    ]
    assert [t["transaction_id"] for t in zipped["transactions.json"]] == [tx.pk]
    kinds = [e["kind"] for e in zipped["timeline.json"]]
    assert kinds[0] == "half_stored" and "check_requested" in kinds
    assert {e["transaction_id"] for e in zipped["timeline.json"]} == {tx.pk}
    assert [(a["action"], a["reason"]) for a in zipped["audit.json"]] == [
        ("check-now", "stuck at 3 a.m.")
    ]
    assert [(a["kind"], a["transaction_id"]) for a in zipped["anomalies.json"]] == [
        ("hanging", tx.pk)
    ]
    meta = zipped["filter.json"]
    assert meta["scope"] == {"kind": "selection", "transaction_ids": [tx.pk, "NOSUCH"]}
    assert meta["made_by"] == "console:ann"
    assert meta["reconciliation_run"]["id"] == run.pk
    assert meta["rows"] == {"transactions": 1, "timeline": len(kinds), "audit": 1, "anomalies": 1}
    # The CSVs hold the same rows, times beside their ISO form.
    for name in ("transactions", "timeline", "audit", "anomalies"):
        assert len(zipped[f"{name}.csv"]) == len(zipped[f"{name}.json"])
    first = zipped["timeline.csv"][0]
    assert first["kind"] == "half_stored" and first["at"].endswith("Z")
    assert zipped["transactions.csv"][0]["born_at"].startswith("20")


def test_each_filter_names_its_transactions():
    gone = discarded(prepare(keys="K-1"))
    prepared = prepare(keys="K-2")
    committed = prepare(keys="K-1")
    transaction_end(transaction_id=committed.pk, producer_group="G", action="commit")
    transaction_check_now(transaction_id=prepared.pk, reason="look", actor="operator:ops")

    def ids(scope: IncidentScope) -> list[str]:
        return [t["transaction_id"] for t in export(scope)["transactions.json"]]

    assert ids(IncidentScope(kind="stuck", filters={"states": ["DISCARDED"]})) == [gone.pk]
    assert ids(IncidentScope(kind="messages", filters={"key": "K-1"})) == [gone.pk, committed.pk]
    assert ids(IncidentScope(kind="audit", filters={"actor": "ops"})) == [prepared.pk]
    assert ids(IncidentScope(kind="stuck", filters={}, producer_groups=frozenset({"G"}))) == [
        gone.pk,
        prepared.pk,
    ]
    with pytest.raises(InvalidInput):  # a key of no producer group: nothing of G
        ids(IncidentScope(kind="stuck", filters={}, producer_groups=frozenset({"H"})))


def test_an_export_of_nothing_or_too_much_is_refused(monkeypatch):
    prepare()
    prepare()

    with pytest.raises(InvalidInput) as empty:
        export(IncidentScope(kind="selection", transaction_ids=("NOSUCH",)))
    monkeypatch.setattr(incident, "EXPORT_MAX_TRANSACTIONS", 1)
    with pytest.raises(InvalidInput) as big:
        export(IncidentScope(kind="stuck", filters={"now": now_ms()}))

    assert empty.value.code == "export_empty"
    assert big.value.code == "export_too_large"
    assert big.value.details == {"count": 2, "max": 1}

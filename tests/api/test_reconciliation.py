"""GET /api/v1/reconciliation/runs/latest and /api/v1/reconciliation/runs/{id} (admin key):
api-v1's reconciliation report, shape in docs/api-additions.md."""

from __future__ import annotations

import pytest

from broker.models import ReconciliationRun
from tests.api_helpers import assert_error
from tests.services.reconciliation_runs import HOUR, T0, anomaly, stored_run

pytestmark = pytest.mark.django_db

LATEST = "/api/v1/reconciliation/runs/latest"
RUN_KEYS = {
    "id",
    "state",
    "trigger",
    "since",
    "until",
    "as_of",
    "started_timestamp",
    "finished_timestamp",
    "spark_master",
    "output_uri",
    "transactions",
    "states",
    "anomaly_counts",
    "anomalies_stored",
    "anomalies_matching",
    "anomalies",
    "error",
}
ANOMALY_KEYS = {"kind", "transaction_id", "msg_id", "producer_group", "topic", "evidence"}


def run_url(run_id: int) -> str:
    return f"/api/v1/reconciliation/runs/{run_id}"


@pytest.fixture
def runs() -> dict[str, ReconciliationRun]:
    """An older and a newer SUCCEEDED run, then a newer FAILED and a RUNNING one."""
    older = stored_run(anomalies=[anomaly("hanging", "OLD", check_times=15)])
    newer = stored_run(
        since=T0 + 2 * HOUR,
        until=T0 + 3 * HOUR,
        as_of=T0 + 5 * HOUR,
        trigger="beat",
        states={"COMMITTED": 7, "ROLLED_BACK": 2, "PREPARED": 1},
        anomalies=[
            anomaly("hanging", "TX-H1", check_times=15, last_check_timestamp=T0),
            anomaly("hanging", "TX-H2", check_times=15, last_check_timestamp=T0),
            anomaly("lost_commit", "TX-L", resolved_timestamp=T0, resolved_by="producer"),
            anomaly("orphan_delivery", "", msg_id="MSG-O", reason="no_half_message"),
        ],
    )
    failed = ReconciliationRun.objects.create(
        state="failed", trigger="beat", since_timestamp=T0 + 3 * HOUR,
        until_timestamp=T0 + 4 * HOUR, as_of_timestamp=T0 + 5 * HOUR, spark_master="local[2]",
        error="RuntimeError: executor lost", finished_timestamp=T0 + 5 * HOUR,
    )  # fmt: skip
    running = ReconciliationRun.objects.create(
        trigger="command", since_timestamp=T0 + 3 * HOUR, until_timestamp=T0 + 4 * HOUR,
        as_of_timestamp=T0 + 5 * HOUR, spark_master="local[2]",
    )  # fmt: skip
    return {"older": older, "newer": newer, "failed": failed, "running": running}


def test_latest_is_the_latest_successful_run_with_every_field(owner, runs):
    response = owner.get(LATEST)

    assert response.status_code == 200
    body = response.json()
    newer = runs["newer"]
    assert set(body) == RUN_KEYS
    assert body["id"] == newer.pk and body["state"] == "succeeded" and body["trigger"] == "beat"
    assert (body["since"], body["until"], body["as_of"]) == (
        T0 + 2 * HOUR,
        T0 + 3 * HOUR,
        T0 + 5 * HOUR,
    )
    assert body["started_timestamp"] == newer.started_timestamp
    assert body["finished_timestamp"] == newer.finished_timestamp
    assert body["spark_master"] == "local[2]"
    assert body["output_uri"] == f"/tmp/archive/reconciliation/run={newer.pk}"
    assert body["transactions"] == 10
    assert body["states"] == {"COMMITTED": 7, "ROLLED_BACK": 2, "PREPARED": 1}
    assert body["anomaly_counts"] == {"hanging": 2, "lost_commit": 1, "orphan_delivery": 1}
    assert body["anomalies_stored"] == body["anomalies_matching"] == 4
    assert body["error"] == ""
    for found in body["anomalies"]:
        assert set(found) == ANOMALY_KEYS
    assert body["anomalies"][2] == {
        "kind": "lost_commit",
        "transaction_id": "TX-L",
        "msg_id": "TX-L",
        "producer_group": "G",
        "topic": "TranTest",
        "evidence": {"resolved_timestamp": T0, "resolved_by": "producer"},
    }
    orphan = body["anomalies"][3]
    assert (orphan["transaction_id"], orphan["msg_id"]) == ("", "MSG-O")


def test_a_run_by_id_whatever_its_state(owner, runs):
    failed = owner.get(run_url(runs["failed"].pk)).json()
    running = owner.get(run_url(runs["running"].pk)).json()
    older = owner.get(run_url(runs["older"].pk)).json()

    assert failed["state"] == "failed" and failed["error"] == "RuntimeError: executor lost"
    assert failed["anomalies"] == [] and failed["anomaly_counts"] == {}
    assert running["state"] == "running" and running["finished_timestamp"] is None
    assert [a["transaction_id"] for a in older["anomalies"]] == ["OLD"]


def test_anomalies_filter_by_kind_and_page(owner, runs):
    url = run_url(runs["newer"].pk)

    hanging = owner.get(url, {"kind": "hanging"}).json()
    first = owner.get(url, {"limit": 2}).json()
    rest = owner.get(url, {"limit": 2, "offset": 2}).json()
    second_hanging = owner.get(url, {"kind": "hanging", "offset": 1, "limit": 5}).json()

    assert [a["transaction_id"] for a in hanging["anomalies"]] == ["TX-H1", "TX-H2"]
    assert hanging["anomalies_matching"] == 2
    assert hanging["anomaly_counts"]["lost_commit"] == 1  # counts are the run's, unfiltered
    assert [a["transaction_id"] for a in first["anomalies"]] == ["TX-H1", "TX-H2"]
    assert [a["kind"] for a in rest["anomalies"]] == ["lost_commit", "orphan_delivery"]
    assert first["anomalies_matching"] == rest["anomalies_matching"] == 4
    assert [a["transaction_id"] for a in second_hanging["anomalies"]] == ["TX-H2"]


@pytest.mark.parametrize(
    "query, field",
    [
        ({"kind": "nope"}, "kind"),
        ({"limit": 0}, "limit"),
        ({"limit": 10001}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 10**20}, "offset"),  # past the database's bigint: a 400, never a 500
        ({"limit": "many"}, "limit"),
    ],
)
def test_a_bad_query_is_a_400_naming_the_field(owner, runs, query, field):
    error = assert_error(owner.get(LATEST, query), 400, "invalid_input")
    assert field in error["details"]["fields"]


def test_before_the_first_successful_run_latest_is_the_contract_404(owner):
    assert_error(owner.get(LATEST), 404, "reconciliation_run_not_found")
    # The query is checked first: a bad one is a 400 whether or not there is a run.
    assert_error(owner.get(LATEST, {"limit": "many"}), 400, "invalid_input")
    ReconciliationRun.objects.create(
        state="failed", trigger="beat", since_timestamp=T0, until_timestamp=T0 + HOUR,
        as_of_timestamp=T0 + 2 * HOUR, spark_master="local[2]",
    )  # fmt: skip
    assert_error(owner.get(LATEST), 404, "reconciliation_run_not_found")


def test_an_unknown_run_is_the_contract_404(owner, runs):
    error = assert_error(owner.get(run_url(999_999)), 404, "reconciliation_run_not_found")
    assert error["details"] == {"id": 999_999}
    assert_error(owner.get("/api/v1/reconciliation/runs/abc"), 404, "not_found")


@pytest.mark.parametrize("url", [LATEST, "/api/v1/reconciliation/runs/1"])
def test_only_an_admin_key_reads_runs(producer, consumer, outsider, anonymous, url):
    for client in (producer, consumer, outsider):
        assert_error(client.get(url), 403, "permission_denied")
    assert_error(anonymous.get(url), 401, "not_authenticated")


def test_the_schema_documents_both_paths(anonymous):
    schema = anonymous.get("/api/schema/?format=json").json()
    paths = schema["paths"]

    for path in ("/api/v1/reconciliation/runs/latest", "/api/v1/reconciliation/runs/{run_id}"):
        operation = paths[path]["get"]
        assert set(paths[path]) - {"parameters"} == {"get"}
        assert {"200", "400", "401", "403", "404", "406", "503"} == set(operation["responses"])
        assert {p["name"] for p in operation["parameters"] if p["in"] == "query"} == {
            "kind",
            "limit",
            "offset",
        }
        ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ReconciliationRunOut")
    component = schema["components"]["schemas"]["ReconciliationRunOut"]
    assert set(component["properties"]) == RUN_KEYS
    assert set(component["required"]) == RUN_KEYS
    anomaly_component = schema["components"]["schemas"]["ReconciliationAnomalyOut"]
    assert set(anomaly_component["required"]) == ANOMALY_KEYS

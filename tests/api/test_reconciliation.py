"""GET /api/v1/reconciliation/runs/latest, /api/v1/reconciliation/runs/{id} and
/api/v1/reconciliation/runs (admin key): api-v1's reconciliation report, shape in
docs/api.md; a skipped run (nothing to reconcile yet) by id and in the list."""

from __future__ import annotations

import pytest

from broker.models import Message, ReconciliationRun
from broker.rules.anomalies import settle_ms
from broker.selectors.reconciliation import reconciliation_params
from broker.services.reconciliation.run import reconciliation_run_scheduled
from tests.api_helpers import assert_error
from tests.services.reconciliation_runs import HOUR, T0, anomaly, archived, stored_run
from tests.support import prepare

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
    "reason",
    "settles_timestamp",
}
SUMMARY_KEYS = RUN_KEYS - {"anomalies_matching", "anomalies"}
RUNS = "/api/v1/reconciliation/runs"
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
    assert body["error"] == "" and body["reason"] == ""
    assert body["settles_timestamp"] is None
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


# --- Skipped runs and the list ------------------------------------------------------------------


def test_a_skipped_run_is_reachable_by_id_with_its_reason_and_settle_time(
    owner, producer_group, topic
):
    assert reconciliation_run_scheduled(trigger="beat") is not None  # nothing archived yet
    tx = prepare(producer_group=producer_group.name)
    stored = Message.objects.get(pk=tx.half_commit_log_offset).store_timestamp
    # The last run ended at the half message; the archive reaches just past it: nothing of
    # what followed has settled yet.
    archived(stored + 1000)
    stored_run(since=stored - HOUR, until=stored, as_of=stored + 1000)
    run_id = reconciliation_run_scheduled(trigger="console:alice")

    body = owner.get(run_url(run_id)).json()
    empty = owner.get(run_url(run_id - 2)).json()

    settle = settle_ms(reconciliation_params(since_ms=0, until_ms=0, as_of_ms=0))
    assert set(body) == RUN_KEYS
    assert body["state"] == "skipped" and body["trigger"] == "console:alice"
    assert (body["since"], body["until"], body["as_of"]) == (
        stored,
        stored + 1000 - settle,
        stored + 1000,
    )
    assert body["reason"].startswith("Nothing to reconcile")
    assert body["settles_timestamp"] == stored + settle
    assert body["finished_timestamp"] == body["started_timestamp"]
    assert body["transactions"] == 0 and body["anomalies"] == [] and body["error"] == ""
    assert empty["state"] == "skipped" and empty["trigger"] == "beat"
    assert (empty["since"], empty["until"], empty["as_of"]) == (None, None, None)
    assert empty["reason"].startswith("Nothing is archived yet")
    assert empty["settles_timestamp"] is None  # no half message was stored then
    # The latest SUCCEEDED run stays the report; the skip is the latest decision.
    assert owner.get(LATEST).json()["state"] == "succeeded"
    assert owner.get(RUNS).json()["runs"][0]["id"] == run_id


def test_the_list_has_every_run_newest_first_and_pages_by_id(owner, runs):
    skipped = ReconciliationRun.objects.create(
        state="skipped", trigger="beat", spark_master="local[2]",
        reason="Nothing is archived yet.", finished_timestamp=T0,
    )  # fmt: skip

    first = owner.get(RUNS, {"limit": 3}).json()
    rest = owner.get(RUNS, {"limit": 3, "before": first["next_before"]}).json()
    everything = owner.get(RUNS).json()

    assert set(first) == {"runs", "next_before"}
    assert [r["id"] for r in first["runs"]] == [
        skipped.pk, runs["running"].pk, runs["failed"].pk,
    ]  # fmt: skip
    assert first["next_before"] == runs["failed"].pk
    assert [r["id"] for r in rest["runs"]] == [runs["newer"].pk, runs["older"].pk]
    assert rest["next_before"] is None
    assert all(set(r) == SUMMARY_KEYS for r in everything["runs"])
    latest = everything["runs"][0]
    assert latest["state"] == "skipped" and latest["reason"] == "Nothing is archived yet."
    assert latest["since"] is None and latest["settles_timestamp"] is None
    newer = everything["runs"][3]
    assert newer["anomaly_counts"] == {"hanging": 2, "lost_commit": 1, "orphan_delivery": 1}
    assert owner.get(RUNS, {"before": 1}).json() == {"runs": [], "next_before": None}


@pytest.mark.parametrize(
    "query, field",
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"before": 0}, "before"),
        ({"before": 2**63}, "before"),  # past the database's bigint: a 400, never a 500
        ({"before": "x"}, "before"),
    ],
)
def test_a_bad_list_query_is_a_400_naming_the_field(owner, query, field):
    error = assert_error(owner.get(RUNS, query), 400, "invalid_input")
    assert field in error["details"]["fields"]


@pytest.mark.parametrize("url", [LATEST, "/api/v1/reconciliation/runs/1", RUNS])
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
    assert "skipped" in schema["components"]["schemas"]["ReconciliationRunOutStateEnum"]["enum"]
    for nullable in ("since", "until", "as_of", "settles_timestamp"):
        assert component["properties"][nullable]["type"] == ["integer", "null"]


def test_the_schema_documents_the_list(anonymous):
    schema = anonymous.get("/api/schema/?format=json").json()

    operation = schema["paths"]["/api/v1/reconciliation/runs"]["get"]

    assert {"200", "400", "401", "403", "406", "503"} == set(operation["responses"])
    assert {p["name"] for p in operation["parameters"]} == {"limit", "before"}
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(page["required"]) == {"runs", "next_before"}
    item = page["properties"]["runs"]["items"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][item]["required"]) == SUMMARY_KEYS

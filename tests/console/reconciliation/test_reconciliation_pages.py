"""The reconciliation in the console: the runs list, a run's page (anomalies linked to their
transactions, filter, pages, charts), "Run now", and the latest run's figures on the overview
and the producer groups page."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

import tasks.pipeline
from broker.models import Message, ReconciliationRun
from broker.rules.anomalies import settle_ms
from broker.rules.audit import iso_utc
from broker.selectors.reconciliation import reconciliation_params
from broker.services.reconciliation import run as service
from broker.services.topology.writes import producer_group_create
from console.views import reconciliation as views
from tests.services.reconciliation_runs import HOUR, T0, analytics_row, anomaly, stored_run
from tests.support import prepare

LIST = "/console/reconciliation/"
TX_LINK = re.compile(r'<a class="tx-link" href="([^"]+)"><code>([^<]+)</code></a>')


def run_page(run_id: int) -> str:
    return f"/console/reconciliation/{run_id}/"


@pytest.fixture
def viewer(console_client) -> Client:
    return console_client("viewer")


@pytest.fixture
def operator(console_client) -> Client:
    return console_client("operator")


@pytest.fixture
def groups(db) -> None:
    producer_group_create(name="G", check_url=None)
    producer_group_create(name="H", check_url=None)


@pytest.fixture
def run(groups, topic) -> ReconciliationRun:
    """A run whose anomalies name two transactions still in the database, one pruned since,
    a delivery with no half message, and a bucket whose unexplained ids include one of them;
    with analytics for G (two hours, two topics) and H."""
    present = [prepare(producer_group="G"), prepare(producer_group="G")]
    found = [
        anomaly("hanging", present[0].pk, check_times=15, last_check_timestamp=T0 + 60_000),
        anomaly("lost_commit", present[1].pk, resolved_timestamp=T0, resolved_by="producer"),
        anomaly("lost_commit", "PRUNED-TX", resolved_timestamp=T0, resolved_by="check"),
        anomaly("orphan_delivery", "", msg_id="MSG-ONLY", reason="no_half_message"),
        anomaly(
            "bucket_mismatch",
            "",
            msg_id="",
            bucket_start_ms=T0,
            bucket_end_ms=T0 + 600_000,
            unexplained_count=2,
            unexplained_transaction_ids=[present[0].pk, "PRUNED-TX"],
        ),
        anomaly("slow_visibility", present[1].pk, latency_ms=2500, sla_ms=1000),
    ]
    analytics = [
        analytics_row("G", "TranTest", T0, committed=8, discarded=2, p50=40, p95=90, p99=120),
        analytics_row("G", "Other", T0, committed=5, p50=30, p95=70, p99=300, unreachable_ms=5),
        analytics_row("G", "TranTest", T0 + HOUR, committed=3, rolled_back=1, p50=20, p95=50,
                      p99=60, unreachable_ms=1000),
        analytics_row("H", "TranTest", T0 + HOUR, rolled_back=4, pending=1),
    ]  # fmt: skip
    return stored_run(anomalies=found, analytics=analytics, trigger="console:alice")


# --- Who may see and do what --------------------------------------------------------------------


def test_anonymous_visitors_go_to_sign_in_and_users_without_a_role_get_403(client, console_user):
    assert client.get(LIST).status_code == 302
    client.force_login(console_user(None))
    assert client.get(LIST).status_code == 403


def test_a_viewer_sees_the_runs_and_the_nav_link_but_no_run_now(viewer, run):
    html = viewer.get(LIST).content.decode()

    assert f'href="{LIST}" aria-current="page">Reconciliation</a>' in html
    assert f'href="{run_page(run.pk)}">#{run.pk}</a>' in html
    assert reverse("console:reconciliation_run_now") not in html
    assert viewer.post(reverse("console:reconciliation_run_now")).status_code == 403


def test_an_operator_queues_a_run_that_records_who_started_it(
    operator, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []

    class App:
        def send_task(self, name: str, **options: object) -> None:
            sent.append((name, options))

    monkeypatch.setattr(service, "current_app", App())
    assert reverse("console:reconciliation_run_now") in operator.get(LIST).content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(reverse("console:reconciliation_run_now"), follow=True)

    user = response.context["user"].get_username()
    assert sent == [("tasks.pipeline.reconcile", {"kwargs": {"trigger": f"console:{user}"}})]
    assert f"Reconciliation queued by console:{user}" in response.content.decode()


def test_run_now_with_nothing_settled_shows_the_skip_and_why(
    operator, monkeypatch, django_capture_on_commit_callbacks, topic, producer_group
):
    """The pipeline worker's task, run in place of Celery's transport: with nothing archived
    the list shows the decision, not "No run yet"."""
    tx = prepare(producer_group="G")

    class App:
        def send_task(self, name: str, kwargs: dict) -> None:
            assert name == "tasks.pipeline.reconcile"
            tasks.pipeline.reconcile(**kwargs)

    monkeypatch.setattr(service, "current_app", App())
    with django_capture_on_commit_callbacks(execute=True):  # the task runs as this exits
        operator.post(reverse("console:reconciliation_run_now"))
    response = operator.get(LIST)

    html = response.content.decode()
    run = ReconciliationRun.objects.get()
    user = response.context["user"].get_username()
    settles = Message.objects.get(pk=tx.half_commit_log_offset).store_timestamp + settle_ms(
        reconciliation_params(since_ms=0, until_ms=0, as_of_ms=0)
    )
    assert run.state == "skipped" and run.trigger == f"console:{user}"
    assert "No run yet" not in html
    notice = re.search(r'<div class="notice" id="latest-decision".*?</div>', html, re.S).group()
    assert "Latest decision: not run." in notice and f"console:{user}" in notice
    assert "Nothing is archived yet" in notice
    assert f'<time datetime="{iso_utc(settles)}" class="settles">' in notice
    row = re.search(r'<tr class="run-skipped">(.*?)</tr>', html, re.S).group(1)
    assert '<span class="badge skipped">skipped</span>' in row
    assert (
        "Nothing is archived yet" in row
        and f'Settles at <time datetime="{iso_utc(settles)}"' in row
    )


# --- The runs list ------------------------------------------------------------------------------


def test_the_list_shows_state_window_counts_anomalies_and_duration(viewer, run):
    ReconciliationRun.objects.create(
        state="failed", trigger="beat", since_timestamp=T0 + 2 * HOUR,
        until_timestamp=T0 + 3 * HOUR, as_of_timestamp=T0 + 4 * HOUR, spark_master="local[2]",
        started_timestamp=T0 + 4 * HOUR, finished_timestamp=T0 + 4 * HOUR + 65_000,
        error="RuntimeError: executor lost",
    )  # fmt: skip
    ReconciliationRun.objects.filter(pk=run.pk).update(
        started_timestamp=T0 + 3 * HOUR, finished_timestamp=T0 + 3 * HOUR + 42_000
    )

    html = viewer.get(LIST).content.decode()

    rows = re.findall(r'<tr class="run-(\w+)">(.*?)</tr>', html, re.S)
    assert [state for state, _ in rows] == ["failed", "succeeded"]
    failed, done = rows[0][1], rows[1][1]
    assert "RuntimeError: executor lost" in failed and "1 min 5 s" in failed
    assert "console:alice" in done and "42 s" in done
    assert "2027-01-15T08:00:00.000Z" in done  # since (T0, UTC)
    assert "COMMITTED 10" in done
    assert f'href="{run_page(run.pk)}?kind=lost_commit">lost_commit</a> 2' in done


def test_the_list_pages_by_run_id(viewer, db, monkeypatch):
    made = [stored_run() for _ in range(3)]
    monkeypatch.setattr(views, "RUNS_PER_PAGE", 2)

    first = viewer.get(LIST).content.decode()
    older = viewer.get(f"{LIST}?before={made[1].pk}").content.decode()

    assert f"?before={made[1].pk}" in first and f"#{made[0].pk}<" not in first
    assert f"#{made[0].pk}<" in older and "?before=" not in older
    assert viewer.get(f"{LIST}?before=x").status_code == 400


# --- A run's page -------------------------------------------------------------------------------


def test_every_anomaly_link_opens_its_transaction_page(viewer, run):
    html = viewer.get(run_page(run.pk)).content.decode()

    links = TX_LINK.findall(html)
    ids = {tid for _, tid in links}
    assert ids == set(
        run.anomalies.exclude(transaction_id__in=["", "PRUNED-TX"]).values_list(
            "transaction_id", flat=True
        )
    )
    assert len(links) == 4  # hanging, lost_commit, slow_visibility, and one bucket id
    for href, tid in links:
        page = viewer.get(href)
        assert page.status_code == 200, href
        assert f"Transaction <code>{tid}</code>" in page.content.decode()


def test_anomalies_not_in_the_database_are_shown_as_text(viewer, run):
    html = viewer.get(run_page(run.pk)).content.decode()

    assert "<code>PRUNED-TX</code> <small" in html and "no longer in the database" in html
    assert 'msg id <code>MSG-ONLY</code> <small class="hint">(no half message)</small>' in html
    assert "(a bucket)" in html
    assert "2027-01-15T08:01:00.000Z" in html  # last_check_timestamp, as a time
    assert "2 s (2500 ms)" in html  # latency_ms, as a span
    assert "<code>transaction_check_max=15</code>" in html  # the settings it judged by


def test_anomalies_filter_by_kind_and_page(viewer, run, monkeypatch):
    lost = viewer.get(run_page(run.pk), {"kind": "lost_commit"}).content.decode()
    assert re.findall(r'<tr data-kind="(\w+)">', lost) == ["lost_commit", "lost_commit"]

    monkeypatch.setattr(views, "ANOMALIES_PER_PAGE", 4)
    first = viewer.get(run_page(run.pk)).content.decode()
    second = viewer.get(run_page(run.pk), {"page": 2}).content.decode()
    shown = re.findall(r'<tr data-kind="(\w+)">', first) + re.findall(
        r'<tr data-kind="(\w+)">', second
    )
    assert shown == list(run.anomalies.order_by("id").values_list("kind", flat=True))
    assert "page 1 of 2 (6 anomalies)" in first and "?page=2" in first

    bad = viewer.get(run_page(run.pk), {"kind": "nope"})
    assert bad.status_code == 400 and "The filter is not valid." in bad.content.decode()


def test_a_failed_runs_page_says_why(viewer, db):
    failed = ReconciliationRun.objects.create(
        state="failed", trigger="beat", since_timestamp=T0, until_timestamp=T0 + HOUR,
        as_of_timestamp=T0 + 2 * HOUR, spark_master="local[2]",
        error="RuntimeError: executor lost", finished_timestamp=T0 + 2 * HOUR,
    )  # fmt: skip

    html = viewer.get(run_page(failed.pk)).content.decode()

    assert '<pre class="error-text">RuntimeError: executor lost</pre>' in html
    assert "No analytics (the run did not succeed)." in html
    assert "Settings judged by" not in html  # none recorded


def test_a_skipped_runs_page_says_why_and_when_to_run_again(viewer, db):
    nothing_settled = ReconciliationRun.objects.create(
        state="skipped", trigger="beat", since_timestamp=T0, until_timestamp=T0 - 60_000,
        as_of_timestamp=T0 + 60_000, spark_master="local[2]", finished_timestamp=T0,
        started_timestamp=T0, reason="Nothing to reconcile: the window is empty.",
        settles_timestamp=T0 + 600_000,
    )  # fmt: skip
    nothing_archived = ReconciliationRun.objects.create(
        state="skipped", trigger="beat", spark_master="local[2]", finished_timestamp=T0,
        started_timestamp=T0, reason="Nothing is archived yet.",
    )  # fmt: skip

    html = viewer.get(run_page(nothing_settled.pk)).content.decode()
    empty = viewer.get(run_page(nothing_archived.pk)).content.decode()

    assert '<span class="badge skipped" id="run-state">skipped</span>' in html
    assert '<td id="skip-reason">Nothing to reconcile: the window is empty.</td>' in html
    assert '<time datetime="2027-01-15T08:10:00.000Z" id="settles">' in html
    assert "2027-01-15T08:00:00.000Z</time> to <time" in html and ": empty" in html
    assert "(the archive's watermark)" in html  # as_of, which it saw
    assert "Anomalies" not in html and "Analytics" not in html and "Output (Parquet)" not in html
    assert '<td id="skip-reason">Nothing is archived yet.</td>' in empty
    assert "no transaction waits to be judged" in empty and "none (nothing archived)" in empty
    assert "Logs read up to" not in empty
    listed = viewer.get(LIST).content.decode()
    assert "Latest decision: not run." in listed  # the newest run is a skip
    assert len(re.findall(r'<tr class="run-skipped">', listed)) == 2


def test_an_unknown_run_is_a_404_page(viewer, db):
    response = viewer.get(run_page(999_999))
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_charts_get_the_runs_analytics_per_hour(viewer, run):
    html = viewer.get(run_page(run.pk)).content.decode()

    source = re.search(r'<script id="run-charts" type="application/json">(.*?)</script>', html)
    charts = json.loads(source.group(1))
    assert charts["hours"] == [T0, T0 + HOUR]
    assert charts["committed"] == [13, 3]
    assert charts["rolled_back"] == [0, 5]
    assert charts["discarded"] == [2, 0]
    assert charts["pending"] == [0, 1]
    assert charts["discard_rate"] == [round(2 / 15, 6), 0.0]  # of the hour, not a mean of rates
    series = {(s["producer_group"], s["topic"]): s for s in charts["latency"]}
    assert series[("G", "TranTest")]["p99_ms"] == [120, 60]
    assert series[("G", "Other")]["p50_ms"] == [30, None]
    assert 'src="/static/console/reconciliation.js"' in html
    assert 'src="/static/vendor/chartjs/chart.umd.min.js"' in html


def test_the_run_page_sums_each_producer_group(viewer, run):
    html = viewer.get(run_page(run.pk)).content.decode()

    g = re.search(r'<tr data-group="G">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r'<td class="num">([^<]*)</td>', g)
    # 19 transactions: 16 committed, 1 rolled back, 2 discarded; worst hourly p99 300 ms;
    # unreachable: 5 ms (hour 1, the largest of its topics) + 1 s (hour 2).
    assert cells == ["19", "16", "1", "2", "0", "10.53 %", "40 ms / 90 ms / 300 ms", "1 s"]


# --- Overview and producer groups ----------------------------------------------------------------


def test_the_overview_shows_the_latest_runs_anomalies_by_kind(viewer, run):
    ReconciliationRun.objects.create(
        state="running", trigger="beat", since_timestamp=T0 + 2 * HOUR,
        until_timestamp=T0 + 3 * HOUR, as_of_timestamp=T0 + 4 * HOUR, spark_master="local[2]",
    )  # fmt: skip

    html = viewer.get("/console/").content.decode()

    summary = re.search(r'id="reconciliation-summary">(.*?)</section>', html, re.S).group(1)
    assert f'href="{run_page(run.pk)}">#{run.pk}</a>' in summary
    assert f'href="{run_page(run.pk)}?kind=hanging">1</a>' in summary
    assert f'href="{run_page(run.pk)}?kind=lost_commit">2</a>' in summary
    assert "is running" in summary


def test_the_overview_before_any_run(viewer, db):
    html = viewer.get("/console/").content.decode()
    assert "No reconciliation has succeeded yet" in html


def test_the_producer_groups_page_shows_each_groups_latest_analytics(viewer, run):
    stored_run(analytics=[analytics_row("H", "TranTest", T0, committed=1)])  # the latest now

    html = viewer.get(reverse("console:producer_groups")).content.decode()

    section = re.search(r'id="group-analytics">(.*?)</section>', html, re.S).group(1)
    assert re.findall(r'<tr data-group="(\w+)">', section) == ["H"]
    h = re.search(r'<tr data-group="H">(.*?)</tr>', section, re.S).group(1)
    assert re.findall(r'<td class="num">([^<]*)</td>', h)[:2] == ["1", "1"]


def test_a_scheduled_undelivered_anomaly_links_to_its_scheduled_message(viewer, groups, topic):
    from broker.rules.clock import now_ms
    from broker.services.timers.schedule import message_send_at

    waiting = message_send_at(delivery_timestamp=now_ms() + HOUR, topic="TranTest", body=b"x")
    found = [
        anomaly(
            "scheduled_undelivered",
            "",
            msg_id=waiting.msg_id,
            commit_log_offset=waiting.commit_log_offset,
            delivery_timestamp=T0 + 60_000,
        ),
        anomaly("scheduled_undelivered", "", msg_id="GONE", commit_log_offset=1),
    ]
    run = stored_run(anomalies=found)
    html = viewer.get(run_page(run.pk)).content.decode()

    href = f"/console/scheduled/{waiting.commit_log_offset}/"
    assert f'<a class="scheduled-link" href="{href}"><code>{waiting.msg_id}</code></a>' in html
    assert viewer.get(href).status_code == 200
    assert "scheduled message <code>GONE</code> <small" in html
    assert "2027-01-15T08:01:00.000Z" in html  # delivery_timestamp, as a time

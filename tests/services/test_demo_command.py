"""``manage.py demo``'s own parts (the demo itself runs end to end in tests/e2e/test_demo.py
and, with ``--reconcile``, tests/e2e/test_demo_reconcile.py): its default URL follows the
address the broker serves, and the reconciliation summary it ends with."""

from __future__ import annotations

import io

import pytest
from django.core.management.base import CommandError

from broker.management.commands.demo import Command
from broker.models import ReconciliationRun
from broker.selectors.reconciliation import reconciliation_run_get
from tests.services.reconciliation_runs import HOUR, T0, analytics_row, anomaly, stored_run

URL = "http://127.0.0.1:8123"


@pytest.mark.parametrize(
    "host, url",
    [
        ("127.0.0.1", "http://127.0.0.1:8123"),
        ("0.0.0.0", "http://127.0.0.1:8123"),  # served on every address: reached on loopback
        ("::", "http://[::1]:8123"),
        ("::1", "http://[::1]:8123"),
        ("broker.example", "http://broker.example:8123"),
    ],
)
def test_the_default_url_is_the_address_the_broker_serves(settings, host, url):
    settings.HALFMOON_HOST, settings.HALFMOON_PORT = host, 8123

    options = Command().create_parser("manage.py", "demo").parse_args([])

    assert options.url == url
    assert not options.reconcile


def summary(run: ReconciliationRun, *, first: int = T0 + 1000, last: int = T0 + 9000) -> str:
    out = io.StringIO()
    command = Command(stdout=out)
    command._summary(
        reconciliation_run_get(run.pk), url=URL, producer_group="G", first=first, last=last
    )
    return out.getvalue()


@pytest.mark.django_db
def test_the_summary_of_a_clean_run_names_its_counts_and_console_page():
    run = stored_run(
        since=T0,
        until=T0 + HOUR,
        states={"COMMITTED": 3, "ROLLED_BACK": 3, "DISCARDED": 4, "PREPARED": 0},
        analytics=[analytics_row("G", "TranTest", T0, committed=3, rolled_back=3, discarded=4)],
    )

    lines = summary(run).splitlines()

    assert lines[0].startswith(f"Reconciliation run {run.pk} succeeded in ")
    assert lines[1:] == [
        "  10 transactions judged: 3 committed, 3 rolled back, 4 discarded, 0 pending",
        "  anomalies: none",
        "  the demo's producer group G: 3 committed, 3 rolled back, 4 discarded, 0 pending",
        f"Console: {URL}/console/reconciliation/{run.pk}/",
        f"API: GET {URL}/api/v1/reconciliation/runs/{run.pk} (admin key)",
    ]


@pytest.mark.django_db
def test_anomalies_in_the_demos_group_or_a_window_missing_some_fail_it():
    found = stored_run(anomalies=[anomaly("lost_commit", "TX1", producer_group="G")])
    other = stored_run(anomalies=[anomaly("lost_commit", "TX2", producer_group="H")])

    with pytest.raises(CommandError, match="found 1 anomalies in the demo's"):
        summary(found)
    assert "  anomalies: 1 (lost_commit 1)" in summary(other)  # not the demo's: exit 0
    with pytest.raises(CommandError, match="does not hold every demo transaction"):
        summary(other, last=T0 + 3 * HOUR)


@pytest.mark.django_db
def test_a_skipped_or_failed_run_fails_it_with_the_reason():
    skipped = ReconciliationRun.objects.create(
        state="skipped", trigger="demo:x", spark_master="local[2]", finished_timestamp=T0,
        reason="Nothing to reconcile: the window is empty.",
    )  # fmt: skip
    failed = ReconciliationRun.objects.create(
        state="failed", trigger="demo:y", spark_master="local[2]", since_timestamp=T0,
        until_timestamp=T0 + HOUR, as_of_timestamp=T0 + HOUR, finished_timestamp=T0,
        error="RuntimeError: executor lost\n\ntraceback",
    )  # fmt: skip

    with pytest.raises(CommandError, match=f"run {skipped.pk} skipped: Nothing to reconcile"):
        summary(skipped)
    with pytest.raises(CommandError, match=f"run {failed.pk} failed: RuntimeError: executor lost"):
        summary(failed)

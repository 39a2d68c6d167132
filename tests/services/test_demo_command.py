"""``manage.py demo``'s own parts (the demo itself runs end to end in tests/e2e/test_demo.py
and, with ``--reconcile``, tests/e2e/test_demo_reconcile.py): its default URL follows the
address the broker serves, its waits follow the settings the running broker answers
(``GET /api/v1/broker-settings``), and the reconciliation summary it ends with."""

from __future__ import annotations

import io
import socket

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from broker.management.commands.demo import (
    Command,
    archive_wait_s,
    broker_settings_read,
    default_timeout_s,
)
from broker.models import AccessKey, ReconciliationRun
from broker.selectors.reconciliation import reconciliation_run_get
from broker.services.topology.writes import access_key_create
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


SHORT_SETTINGS = {  # the README's demo section
    "HALFMOON_TRANSACTION_TIMEOUT_MS": 1000,
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": 1000,
    "HALFMOON_TRANSACTION_CHECK_MAX": 3,
    "HALFMOON_ARCHIVE_SEGMENT_MS": 5000,
    "HALFMOON_ARCHIVE_LAG_MS": 1000,
    "HALFMOON_ARCHIVE_INTERVAL_MS": 2000,
}


@pytest.mark.django_db(transaction=True)
def test_the_waits_are_those_of_the_settings_the_broker_answers(live_server, broker_settings):
    broker_settings.update(SHORT_SETTINGS)  # the live server's, read per request
    _, token = access_key_create(name="demo-admin", is_admin=True)

    broker = broker_settings_read(live_server.url, token)

    assert {name: broker[name] for name in SHORT_SETTINGS} == SHORT_SETTINGS
    # 1 s + (3 + 1) x 1 s, plus a minute for the scans and the consumer.
    assert default_timeout_s(broker) == 65
    # settle (1 s + 4 x 1 s + 2 scans of 1 s) + segment 5 s + lag 1 s + interval 2 s, + 2 min
    assert broker["reconciliation_settle_ms"] == 7000
    assert archive_wait_s(broker) == 15 + 120


@pytest.mark.django_db(transaction=True)
def test_with_the_defaults_the_waits_are_the_defaults(live_server):
    _, token = access_key_create(name="demo-admin", is_admin=True)

    broker = broker_settings_read(live_server.url, token)

    assert default_timeout_s(broker) == 6 + 16 * 30 + 60
    # settle 6 s + 16 x 30 s + 2 s, then a 10-minute segment, a minute's lag and interval
    assert archive_wait_s(broker) == 488 + 600 + 60 + 60 + 120


@pytest.mark.django_db(transaction=True)
def test_a_key_the_broker_refuses_is_a_command_error_naming_the_answer(live_server):
    _, token = access_key_create(name="demo-app", producer_groups=["G"])

    with pytest.raises(CommandError, match=r"broker-settings\): \[403 permission_denied\]"):
        broker_settings_read(live_server.url, token)


def _dead_url() -> str:
    """A loopback URL nobody listens on (a port just bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.django_db
def test_no_broker_at_the_url_fails_before_the_demo_and_leaves_no_key():
    url = _dead_url()

    with pytest.raises(CommandError, match=f"Could not read the broker's settings .GET {url}/"):
        call_command("demo", "--url", url, stdout=io.StringIO())

    assert not AccessKey.objects.filter(name__startswith="demo-").exists()


def test_a_wait_that_sees_progress_waits_on_and_one_that_does_not_gives_up(monkeypatch):
    monkeypatch.setattr("broker.management.commands.demo.POLL_S", 0.01)
    polls = iter(range(1000))
    moving = {"at": 0}

    def archive_reaches() -> bool | None:
        moving["at"] = next(polls)
        return True if moving["at"] >= 100 else None  # 100 polls: at least 1 s, over 0.5 s

    found = Command()._wait("x", archive_reaches, 0.5, progress=lambda: moving["at"])

    assert found is True and moving["at"] == 100
    with pytest.raises(CommandError, match="Gave up after 0.1 s without progress waiting for y"):
        Command()._wait("y", lambda: None, 0.1, progress=lambda: 0)


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

"""``manage.py reconcile``: its window arguments, summary, progress bar and exit status (the
job itself is ``FakeJob`` here; ``tests/services/test_reconciliation.py`` runs the command
over the real job too)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from broker.management.commands.reconcile import ProgressBar, timestamp_ms
from broker.models import ReconciliationRun
from broker.pipeline.progress import ProgressEvent
from tests.services.reconciliation_runs import HOUR, T0, FakeJob, archived, fake_job_install

pytestmark = pytest.mark.django_db

AS_OF = T0 + 6 * HOUR


@pytest.fixture
def fake_job(monkeypatch, settings, tmp_path) -> FakeJob:
    return fake_job_install(monkeypatch, settings, tmp_path)


def reconcile(*args: str) -> str:
    out = io.StringIO()
    call_command("reconcile", "--no-progress", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    "text, ms",
    [
        ("1800000000000", 1_800_000_000_000),
        ("2027-01-15T08:00:00Z", T0),
        ("2027-01-15T08:00", T0),  # no zone: UTC
        ("2027-01-15T09:00:00+01:00", T0),
        ("2027-01-15", T0 - 8 * HOUR),
    ],
)
def test_times_are_ms_or_iso_8601(text, ms):
    assert timestamp_ms(text) == ms


def test_a_bad_time_is_a_usage_error():
    with pytest.raises(CommandError, match="--since"):
        call_command("reconcile", "--since", "yesterday")


def test_a_run_prints_its_summary(fake_job):
    archived(AS_OF)

    out = reconcile("--since", "2027-01-15T08:00:00Z", "--until", str(T0 + HOUR))

    run = ReconciliationRun.objects.get()
    assert (run.since_timestamp, run.until_timestamp, run.trigger) == (T0, T0 + HOUR, "command")
    assert f"Reconciliation run {run.pk} succeeded" in out
    assert "from 2027-01-15T08:00:00.000Z to 2027-01-15T09:00:00.000Z" in out
    assert "Transactions judged: 3" in out
    assert "  COMMITTED    2" in out and "  ROLLED_BACK  1" in out
    assert "Anomalies: 1\n" in out and "  lost_commit                1" in out
    assert f"Output: {run.output_uri}" in out


def test_a_refusal_exits_1_with_the_reason(fake_job):
    with pytest.raises(CommandError, match="Nothing is archived yet") as caught:
        reconcile()
    assert caught.value.returncode == 1
    assert not fake_job.calls
    skipped = ReconciliationRun.objects.get()  # the decision is kept, for the console and API
    assert (skipped.state, skipped.trigger) == ("skipped", "command")
    assert f"Recorded as reconciliation run {skipped.pk} (skipped)." in str(caught.value)


def test_a_failed_run_exits_1_naming_the_run(fake_job):
    archived(AS_OF)
    fake_job.error = RuntimeError("executor lost")

    with pytest.raises(CommandError) as caught:
        reconcile()

    run = ReconciliationRun.objects.get()
    assert caught.value.returncode == 1
    assert "RuntimeError: executor lost" in str(caught.value)
    assert f"Reconciliation run {run.pk} is FAILED" in str(caught.value)


def test_the_progress_bar_shows_tasks_jobs_and_the_stage():
    stream = io.StringIO()
    bar = ProgressBar(stream)

    bar.update(ProgressEvent(1, 3, 10, 40, "parquet at reconcile.py:120"))
    bar.update(ProgressEvent(3, 3, 40, 40, ""))
    bar.close()

    text = stream.getvalue()
    assert "jobs 1/3 parquet at reconcile.py:120" in text and "10/40" in text
    assert "jobs 3/3" in text and "40/40" in text

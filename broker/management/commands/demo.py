"""``manage.py demo [--url URL] [--messages 10] [--timeout-s S] [--reconcile
[--archive-timeout-s S] [--reconcile-timeout-s S]]``: the RocketMQ transaction example
(TransactionProducer + TransactionListenerImpl + a consumer of TranTest) against a running
broker (web server, Celery worker and beat; with ``--reconcile`` also the ``pipeline`` worker).

The example is the client's ``halfmoon_client.examples.seed_demo`` (HTTP only). This command
makes itself an admin and an application key in the database (deleted afterwards), reads the
running broker's settings with the admin key (``GET /api/v1/broker-settings``: only the
broker's shell needs the README's short settings), and waits on those: the example's deadline,
and with ``--reconcile`` the archive reaching the demo's transactions plus the broker's
``reconciliation_settle_ms``, then a run queued on the pipeline worker (trigger ``demo:<run>``)
whose summary it prints. Default ``--url``: ``http://HALFMOON_HOST:HALFMOON_PORT``. Exit
status 0 only if 1, 4, 7 are committed and consumed, 2, 5, 8 rolled back, 0, 3, 6, 9
discarded, and with ``--reconcile`` the run judged every demo transaction and found no anomaly
(docs/reconciliation.md "The demo's run").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse
from halfmoon_client.errors import HalfmoonError
from halfmoon_client.examples.seed_demo import (
    DemoFailed,
    SeedDemo,
    add_run_arguments,
    run_suffix,
)
from halfmoon_client.transport import JsonApi

from broker.models import AccessKey, ReconciliationRun
from broker.rules.audit import iso_utc
from broker.rules.durations import duration_text
from broker.selectors.reconciliation import (
    half_messages_stored_range,
    producer_group_analytics,
    reconciliation_anomalies,
    reconciliation_run_by_trigger,
)
from broker.services.archive.watermark import archived_until_or_none
from broker.services.reconciliation.run import reconciliation_run_queue
from broker.services.topology.writes import access_key_create

T = TypeVar("T")

POLL_S = 0.5
BROKER_SETTINGS_PATH = "/api/v1/broker-settings"
RECONCILE_TIMEOUT_S = 600.0
"""The default wait for the pipeline worker's run: Spark's start when the worker has none yet
(20-40 s), the job, and a loaded machine's slack."""
FINAL_STATES = (
    ReconciliationRun.State.SUCCEEDED,
    ReconciliationRun.State.FAILED,
    ReconciliationRun.State.SKIPPED,
)


def broker_url() -> str:
    """The base URL of the broker this environment serves: ``HALFMOON_HOST`` and
    ``HALFMOON_PORT`` (``bin/run``'s and ``python -m halfmoon.web``'s address), the wildcard
    addresses replaced by loopback, an IPv6 address in brackets."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(
        settings.HALFMOON_HOST, settings.HALFMOON_HOST
    )
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.HALFMOON_PORT}"


def broker_settings_read(url: str, token: str) -> dict[str, int]:
    """The running broker's settings and derived values by name (``HALFMOON_ARCHIVE_SEGMENT_MS``,
    ``reconciliation_settle_ms``: ``GET /api/v1/broker-settings`` with the admin ``token``).
    Raises CommandError when the broker at ``url`` does not answer them."""
    api = JsonApi(url, token, timeout_s=10.0)
    try:
        answer = api.request("GET", BROKER_SETTINGS_PATH)[1]
    except HalfmoonError as exc:
        raise CommandError(
            f"Could not read the broker's settings (GET {url.rstrip('/')}{BROKER_SETTINGS_PATH}): "
            f"{exc}. Is the broker running at --url, on this database?"
        ) from exc
    finally:
        api.close()
    return {s["name"]: s["value"] for s in answer["settings"] + answer["derived"]}


def default_timeout_s(broker: dict[str, int]) -> float:
    """How long the UNKNOW transactions take to be discarded with the ``broker``'s settings
    (``broker_settings_read``): the first check after the transaction timeout, then one check
    per interval up to the check max, and the discard one interval later; plus a minute for
    scans and the consumer (s)."""
    timeout = broker["HALFMOON_TRANSACTION_TIMEOUT_MS"]
    interval = broker["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"]
    check_max = broker["HALFMOON_TRANSACTION_CHECK_MAX"]
    return (timeout + (check_max + 1) * interval) / 1000 + 60


def archive_wait_s(broker: dict[str, int]) -> float:
    """How long the archive may take, after the demo, to reach its last half message plus the
    ``broker``'s settle time: that time, then the segment holding it closing (a segment, the
    archive lag), the next export (an interval), and two minutes for the export itself (s;
    counted again from each move of the archive: ``Command._wait``'s ``progress``)."""
    wait_ms = (
        broker["reconciliation_settle_ms"]
        + broker["HALFMOON_ARCHIVE_SEGMENT_MS"]
        + broker["HALFMOON_ARCHIVE_LAG_MS"]
        + broker["HALFMOON_ARCHIVE_INTERVAL_MS"]
    )
    return wait_ms / 1000 + 120


def broker_settings_text(broker: dict[str, int]) -> str:
    """The ``broker``'s settings the demo waits on, in one line."""
    return (
        f"transaction timeout {duration_text(broker['HALFMOON_TRANSACTION_TIMEOUT_MS'])}, "
        f"check interval {duration_text(broker['HALFMOON_TRANSACTION_CHECK_INTERVAL_MS'])}, "
        f"check max {broker['HALFMOON_TRANSACTION_CHECK_MAX']}; archive segments of "
        f"{duration_text(broker['HALFMOON_ARCHIVE_SEGMENT_MS'])}, exported every "
        f"{duration_text(broker['HALFMOON_ARCHIVE_INTERVAL_MS'])}"
    )


def states_text(counts: dict[str, int]) -> str:
    """Final-state counts as ``3 committed, 3 rolled back, 4 discarded, 0 pending``."""
    return (
        f"{counts.get('COMMITTED', 0)} committed, {counts.get('ROLLED_BACK', 0)} rolled back, "
        f"{counts.get('DISCARDED', 0)} discarded, {counts.get('PREPARED', 0)} pending"
    )


class Command(BaseCommand):
    help = (
        "Run RocketMQ's transaction example (10 half messages to TranTest, a listener answering "
        "back-checks by value % 3, a consumer) against a running broker. Exit 0 only if 1, 4, 7 "
        "are committed and consumed, 2, 5, 8 rolled back and 0, 3, 6, 9 discarded. With "
        "--reconcile, then archive and reconcile them on the pipeline worker and print the "
        "run's summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_run_arguments(parser)
        parser.set_defaults(url=broker_url())
        parser.add_argument(
            "--timeout-s",
            type=float,
            default=None,
            help="give up (exit 1) if not every transaction is final and consumed by then; "
            "default: long enough for the running broker's check settings (GET "
            "/api/v1/broker-settings): timeout + (check max + 1) x check interval + 60 s",
        )
        parser.add_argument(
            "--reconcile",
            action="store_true",
            help="then wait until the archive holds the demo's settled transactions, run the "
            "reconciliation on the pipeline worker and print its summary (exit 1 unless it "
            "succeeded, judged all of them and found no anomaly in them)",
        )
        parser.add_argument(
            "--archive-timeout-s",
            type=float,
            default=None,
            help="with --reconcile, give up when the archive has not moved for this long; "
            "default: from the broker's settings (settle time + segment + archive lag + "
            "archive interval + 120 s)",
        )
        parser.add_argument(
            "--reconcile-timeout-s",
            type=float,
            default=RECONCILE_TIMEOUT_S,
            help=f"give up waiting for the run after this long (default {RECONCILE_TIMEOUT_S:g})",
        )

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def handle(self, *args: Any, **options: Any) -> None:
        if options["messages"] < 1:
            raise CommandError("--messages must be at least 1.")
        suffix = run_suffix()
        producer_group = f"demo_producer_{suffix}"
        consumer_group = f"demo_consumer_{suffix}"
        key_names = [f"demo-admin-{suffix}", f"demo-app-{suffix}"]
        # The only database writes. Everything else goes over HTTP, through the client.
        _, admin_token = access_key_create(name=key_names[0], is_admin=True)
        _, app_token = access_key_create(
            name=key_names[1], producer_groups=[producer_group], consumer_groups=[consumer_group]
        )
        try:
            broker = broker_settings_read(options["url"], admin_token)
            self._say(f"The broker at {options['url']} runs with {broker_settings_text(broker)}")
            demo = SeedDemo(
                url=options["url"],
                admin_token=admin_token,
                token=app_token,
                producer_group=producer_group,
                consumer_group=consumer_group,
                count=options["messages"],
                timeout_s=options["timeout_s"] or default_timeout_s(broker),
                check_host=options["check_host"],
                say=self._say,
            )
            demo.run()
        except DemoFailed as exc:
            raise CommandError(str(exc)) from exc
        finally:
            # The tokens die with this run; so do their keys.
            AccessKey.objects.filter(name__in=key_names).delete()
        if options["reconcile"]:
            self._reconcile(
                url=options["url"].rstrip("/"),
                broker=broker,
                producer_group=producer_group,
                trigger=f"demo:{suffix}",
                archive_timeout_s=options["archive_timeout_s"] or archive_wait_s(broker),
                timeout_s=options["reconcile_timeout_s"],
            )

    def _wait(
        self,
        what: str,
        found: Callable[[], T | None],
        timeout_s: float,
        progress: Callable[[], object] | None = None,
    ) -> T:
        """``found()``'s first value that is not None, asked every ``POLL_S``; CommandError
        naming ``what`` after ``timeout_s``, counted from the last change of ``progress()``
        when given (a slow archive that still moves, on a loaded machine, is waited on)."""
        deadline = time.monotonic() + timeout_s
        last = progress() if progress is not None else None
        while (value := found()) is None:
            if progress is not None and (now := progress()) != last:
                last, deadline = now, time.monotonic() + timeout_s
            if time.monotonic() > deadline:
                still = " without progress" if progress is not None else ""
                raise CommandError(f"Gave up after {timeout_s:g} s{still} waiting for {what}.")
            time.sleep(POLL_S)
        return value

    def _reconcile(
        self,
        *,
        url: str,
        broker: dict[str, int],
        producer_group: str,
        trigger: str,
        archive_timeout_s: float,
        timeout_s: float,
    ) -> None:
        """Wait for the archive (by the ``broker``'s settings, ``broker_settings_read``), queue
        the run on the pipeline worker, wait for it, print it."""
        stored = half_messages_stored_range(producer_group)
        if stored is None:
            raise CommandError(f"The demo stored no half message for {producer_group}.")
        first, last = stored
        settle = broker["reconciliation_settle_ms"]
        reach = last + settle + 1
        self._say(
            f"Reconciliation: waiting for the archive to reach {iso_utc(reach)} (the last half "
            f"message plus {duration_text(settle)} to settle; the pipeline worker exports every "
            f"{duration_text(broker['HALFMOON_ARCHIVE_INTERVAL_MS'])} in segments of "
            f"{duration_text(broker['HALFMOON_ARCHIVE_SEGMENT_MS'])})"
        )
        self._wait(
            "the archive to reach the demo's settled transactions: is the pipeline worker "
            "running (bin/run starts it), with the web server's HALFMOON_ARCHIVE_* settings?",
            lambda: True if (archived_until_or_none() or 0) >= reach else None,
            archive_timeout_s,
            progress=archived_until_or_none,
        )
        reconciliation_run_queue(trigger=trigger)
        self._say(
            f"archived up to {iso_utc(archived_until_or_none() or 0)}; reconciliation queued on "
            f"the pipeline worker as {trigger} (Spark may take a minute to start)"
        )
        run = self._wait(
            f"the reconciliation run {trigger}: is the pipeline worker running, or was another "
            "run going on (then it recorded nothing)?",
            lambda: self._finished(trigger),
            timeout_s,
        )
        self._summary(run, url=url, producer_group=producer_group, first=first, last=last)

    @staticmethod
    def _finished(trigger: str) -> ReconciliationRun | None:
        run = reconciliation_run_by_trigger(trigger)
        return run if run is not None and run.state in FINAL_STATES else None

    def _summary(
        self, run: ReconciliationRun, *, url: str, producer_group: str, first: int, last: int
    ) -> None:
        """Print ``run``'s summary and where to see it; CommandError unless it succeeded over a
        window holding the demo's half messages (``first``..``last``) with no anomaly in
        ``producer_group``."""
        page = f"{url}{reverse('console:reconciliation_run', args=[run.pk])}"
        if run.state == ReconciliationRun.State.SKIPPED:
            raise CommandError(
                f"Reconciliation run {run.pk} skipped: {run.reason} Do the broker's processes "
                f"(web server and pipeline worker) share their HALFMOON_* settings? Console: {page}"
            )
        if run.state == ReconciliationRun.State.FAILED:
            error = run.error.splitlines()[0] if run.error else "no error recorded"
            raise CommandError(f"Reconciliation run {run.pk} failed: {error} Console: {page}")
        say = self._say
        say(
            f"Reconciliation run {run.pk} {run.state} in {duration_text(run.duration_ms or 0)}: "
            f"half messages stored from {iso_utc(run.since_timestamp)} to "
            f"{iso_utc(run.until_timestamp)}"
        )
        say(f"  {run.transactions} transactions judged: {states_text(run.states)}")
        total = sum(run.anomaly_counts.values())
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(run.anomaly_counts.items()))
        say(f"  anomalies: {f'{total} ({kinds})' if total else 'none'}")
        group = producer_group_analytics(run).get(producer_group)
        if group is not None:
            counts = {
                "COMMITTED": group.committed,
                "ROLLED_BACK": group.rolled_back,
                "DISCARDED": group.discarded,
                "PREPARED": group.pending,
            }
            say(f"  the demo's producer group {producer_group}: {states_text(counts)}")
        say(f"Console: {page}")
        say(f"API: GET {url}/api/v1/reconciliation/runs/{run.pk} (admin key)")
        if not run.since_timestamp <= first or not last < run.until_timestamp:
            raise CommandError(
                f"Run {run.pk}'s window does not hold every demo transaction (half messages "
                f"stored from {iso_utc(first)} to {iso_utc(last)}): another run judged some."
            )
        found = reconciliation_anomalies(run).filter(producer_group=producer_group).count()
        if found:
            raise CommandError(f"The reconciliation found {found} anomalies in the demo's.")

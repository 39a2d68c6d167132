"""The /metrics rollup (broker.services.metrics, broker.selectors.metrics): a scrape folds only
the journal rows since the last one, and its figures are those of a GROUP BY over the whole
tables (what the collector computed before the rollup), across scrapes, processes (other
database connections), resets and rows that commit out of id order."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Count
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.conf import conf
from broker.constants import FINISH_LATENCY_BUCKETS_S
from broker.metrics import REGISTRY
from broker.models import (
    MetricRollup,
    MetricWatermark,
    ProducerGroup,
    ScheduledMessage,
    Transaction,
    TransactionEvent,
)
from broker.rules.clock import now_ms
from broker.services.metrics import HORIZON_LOCK_TIMEOUT_MS, metrics_rollup_reset
from broker.services.topology.writes import producer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.operator import (
    transaction_operator_resolve,
    transaction_resume_check,
)
from broker.services.transactions.resolution import transaction_discard
from tests.support import prepare

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# The process's own series (broker.plumbing.database_status), not read from the database.
PROCESS_FAMILIES = {"halfmoon_database_up", "halfmoon_database_unavailable_responses"}


def scrape() -> Samples:
    """One scrape of the registry /metrics serves, as {(sample name, sorted labels): value},
    without the process's own series."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        if family.name in PROCESS_FAMILIES:
            continue
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def full_aggregation() -> Samples:
    """The figures as the collector computed them before the rollup: a GROUP BY over the whole
    transaction and event tables (written here independently of the code under test)."""
    out: Samples = {}
    names = {
        "PREPARED": "rocketmq_half_messages",
        "COMMITTED": "rocketmq_commit_messages_total",
        "ROLLED_BACK": "rocketmq_rollback_messages_total",
    }
    rows = Transaction.objects.values_list("topic", "state").annotate(n=Count("pk")).order_by()
    for topic, state, n in rows:
        if state in names:
            out[(names[state], (("topic", topic),))] = n
    latencies: dict[str, list[int]] = {}
    for topic, resolved, born in Transaction.objects.filter(
        state__in=["COMMITTED", "ROLLED_BACK"]
    ).values_list("topic", "resolved_timestamp", "born_timestamp"):
        latencies.setdefault(topic, []).append(resolved - born)
    hist = "rocketmq_finish_message_latency"
    for topic, values in latencies.items():
        for bound in FINISH_LATENCY_BUCKETS_S:
            le = (("le", str(bound)), ("topic", topic))
            out[(f"{hist}_bucket", le)] = sum(v <= bound * 1000 for v in values)
        out[(f"{hist}_bucket", (("le", "+Inf"), ("topic", topic)))] = len(values)
        out[(f"{hist}_count", (("topic", topic),))] = len(values)
        out[(f"{hist}_sum", (("topic", topic),))] = sum(values) / 1000
    checks = "COMMIT_MESSAGE ROLLBACK_MESSAGE UNKNOW ACCEPTED TIMEOUT INVALID POLLED UNDELIVERED"
    for outcome in checks.split():
        out[("halfmoon_checks_total", (("outcome", outcome),))] = 0
    for reason in ("check_max", "file_reserved_time"):
        out[("halfmoon_discarded_total", (("reason", reason),))] = 0
    for kind in ("resolved:COMMIT", "resolved:ROLLBACK", "resumed", "check_requested"):
        out[("halfmoon_operator_actions_total", (("kind", kind),))] = 0
    events = TransactionEvent.objects.values_list("kind", "outcome").annotate(n=Count("pk"))
    for kind, outcome, n in events.order_by():
        if kind in ("check_sent", "check_undelivered"):
            key = ("halfmoon_checks_total", (("outcome", outcome),))
        elif kind == "discarded":
            key = ("halfmoon_discarded_total", (("reason", outcome),))
        else:
            key = ("halfmoon_operator_actions_total", (("kind", f"{kind}:{outcome}"),))
            key = key if outcome else ("halfmoon_operator_actions_total", (("kind", kind),))
        out[key] = out.get(key, 0) + n
    out.update(per_group_aggregation())
    out.update(scheduled_aggregation())
    return out


def scheduled_aggregation() -> Samples:
    """The delay and timer messages waiting, the earliest due time (s) and how many are past
    due, from the whole table."""
    waiting = ScheduledMessage.objects.filter(state="SCHEDULED")
    out: Samples = {("halfmoon_scheduled_messages", ()): waiting.count()}
    due = [row.delivery_timestamp for row in waiting]
    if due:
        out[("halfmoon_scheduled_next_due_timestamp_seconds", ())] = min(due) / 1000
    now = now_ms()
    out[("halfmoon_scheduled_overdue_messages", ())] = sum(d < now for d in due)
    return out


def per_group_aggregation() -> Samples:
    """The alerting families per producer group as a pass over the whole tables would give
    them (written here independently of the code under test): pending count, oldest birth and
    most checks of the PREPARED rows, checks and discards by group, reachability and the latest
    answered check (any check_sent but TIMEOUT)."""
    out: Samples = {}
    checks = "COMMIT_MESSAGE ROLLBACK_MESSAGE UNKNOW ACCEPTED TIMEOUT INVALID POLLED UNDELIVERED"
    for group in ProducerGroup.objects.all():
        g = (("producer_group", group.name),)
        out[("halfmoon_pending_transactions", g)] = 0
        down = group.unreachable_since is not None or group.unanswered_since is not None
        out[("halfmoon_producer_group_reachable", g)] = 0 if down else 1
        for outcome in checks.split():
            out[("halfmoon_producer_group_checks_total", (("outcome", outcome), *g))] = 0
        for reason in ("check_max", "file_reserved_time"):
            out[("halfmoon_producer_group_discarded_total", (*g, ("reason", reason)))] = 0
    out[("halfmoon_transaction_check_max", ())] = conf.transaction_check_max
    for tx in Transaction.objects.filter(state="PREPARED"):
        g = (("producer_group", tx.producer_group),)
        out[("halfmoon_pending_transactions", g)] += 1
        born = ("halfmoon_pending_oldest_timestamp_seconds", g)
        out[born] = min(out.get(born, tx.born_timestamp / 1000), tx.born_timestamp / 1000)
        most = ("halfmoon_pending_max_check_times", g)
        out[most] = max(out.get(most, 0), tx.check_times)
    group_of = dict(Transaction.objects.values_list("transaction_id", "producer_group"))
    for event in TransactionEvent.objects.all():
        group = group_of.get(event.transaction_id)
        if group is None:
            continue
        g = (("producer_group", group),)
        if event.kind in ("check_sent", "check_undelivered"):
            key = ("halfmoon_producer_group_checks_total", (("outcome", event.outcome), *g))
        elif event.kind == "discarded":
            key = ("halfmoon_producer_group_discarded_total", (*g, ("reason", event.outcome)))
        else:
            continue
        out[key] = out.get(key, 0) + 1
        if event.kind == "check_sent" and event.outcome != "TIMEOUT":
            last = ("halfmoon_producer_group_last_answer_timestamp_seconds", g)
            out[last] = max(out.get(last, 0), event.timestamp / 1000)
    return out


@pytest.fixture
def topics(db) -> None:
    topic_create(name="TranTest", queue_nums=4)
    topic_create(name="Other", queue_nums=2)
    producer_group_create(name="G", check_url=None)


def _discard(tx: Transaction, reason: str) -> None:
    with transaction.atomic():
        transaction_discard(Transaction.objects.select_for_update().get(pk=tx.pk), reason=reason)


def _end_after(tx: Transaction, action: str, age_ms: int) -> None:
    """End ``tx`` as if it had been born ``age_ms`` ago (to fill the latency buckets)."""
    Transaction.objects.filter(pk=tx.pk).update(born_timestamp=now_ms() - age_ms)
    transaction_end(transaction_id=tx.pk, producer_group="G", action=action)


def _traffic(round_no: int) -> None:
    """Some of everything the journals record: ends on two topics with latencies across the
    buckets, check events, discards, an operator resolution and a resume."""
    txs = [prepare(topic="TranTest" if i % 3 else "Other") for i in range(8)]
    ages = [0, 7_000, 90_000, 700_000, 4_000_000, 50_000_000]
    for i, tx in enumerate(txs[:5]):
        _end_after(tx, "commit" if (i + round_no) % 2 else "rollback", ages[(i + round_no) % 6])
    for outcome in ("UNKNOW", "TIMEOUT", "ACCEPTED")[: round_no + 1]:
        TransactionEvent.objects.create(
            transaction_id=txs[5].pk, kind="check_sent", check_times=1, outcome=outcome
        )
    TransactionEvent.objects.create(
        transaction_id=txs[5].pk, kind="check_undelivered", outcome="UNDELIVERED"
    )
    _discard(txs[6], "check_max")
    transaction_operator_resolve(
        transaction_id=txs[6].pk, action="commit", reason="by hand", actor="operator:t"
    )
    _discard(txs[7], "file_reserved_time")
    transaction_resume_check(transaction_id=txs[7].pk, actor="operator:t")


def test_a_scrape_gives_the_full_aggregation_over_several_scrapes_with_rows_between(topics):
    assert scrape() == full_aggregation()

    for round_no in range(3):
        _traffic(round_no)
        found = scrape()
        assert found == full_aggregation()
        assert found[("rocketmq_commit_messages_total", (("topic", "TranTest"),))] > 0
        assert scrape() == found  # a scrape with nothing new changes nothing

    # The counters come from the rollup, not from the tables: everything is folded.
    assert MetricRollup.objects.filter(source="event", kind="resumed").get().count == 3
    assert _watermark("event") == TransactionEvent.objects.latest("pk").pk


@pytest.mark.django_db(transaction=True)
def test_the_totals_are_in_the_database_for_every_process(topics):
    _traffic(0)
    first = scrape()
    folded = {(r.kind, r.label): r.count for r in MetricRollup.objects.filter(source="resolution")}

    # Another process: a new collector on another connection reads the same rollup.
    elsewhere: list[Samples] = []
    _in_other_connection(lambda: elsewhere.append(scrape()))

    assert elsewhere == [first]
    assert (
        sum(folded.values())
        == Transaction.objects.filter(state__in=["COMMITTED", "ROLLED_BACK"]).count()
    )


def test_a_reset_recounts_from_the_journals(topics):
    _traffic(1)
    before = scrape()

    metrics_rollup_reset()

    assert not MetricRollup.objects.exists()
    assert set(MetricWatermark.objects.values_list("last_id", flat=True)) == {0}
    assert scrape() == before == full_aggregation()


def test_a_repairing_rebuild_resets_the_rollup(topics):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    Transaction.objects.filter(pk=tx.pk).update(topic="Other")  # a row gone wrong
    assert scrape()[("rocketmq_commit_messages_total", (("topic", "Other"),))] == 1  # folded

    with pytest.raises(CommandError):  # exit 1: differences found and repaired
        call_command("rebuild_transactions", stdout=io.StringIO())

    after = scrape()
    assert after == full_aggregation()
    assert after[("rocketmq_commit_messages_total", (("topic", "TranTest"),))] == 1
    assert ("rocketmq_commit_messages_total", (("topic", "Other"),)) not in after


def _in_other_connection(job: Callable[[], Any]) -> threading.Thread:
    """Run ``job`` in a thread (its own database connection) and wait for it."""
    thread = _start(job)
    thread.join(30)
    assert not thread.is_alive()
    return thread


def _start(job: Callable[[], Any]) -> threading.Thread:
    def run() -> None:
        try:
            job()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _held_event(transaction_id: str, inserted: threading.Event, release: threading.Event):
    """A writer that inserts a check event (drawing its id) and commits only on ``release``."""

    def job() -> None:
        with transaction.atomic():
            TransactionEvent.objects.create(
                transaction_id=transaction_id, kind="check_sent", outcome="TIMEOUT"
            )
            inserted.set()
            assert release.wait(30)

    return job


def _watermark(source: str) -> int:
    return (
        MetricWatermark.objects.filter(source=source).values_list("last_id", flat=True).first() or 0
    )


def _timeouts() -> float:
    return scrape()[("halfmoon_checks_total", (("outcome", "TIMEOUT"),))]


@pytest.mark.django_db(transaction=True)
def test_a_row_committed_after_a_higher_id_is_counted_once_eventually():
    inserted, release = threading.Event(), threading.Event()
    writer = _start(_held_event("LOW", inserted, release))
    assert inserted.wait(30)
    TransactionEvent.objects.create(transaction_id="HIGH", kind="check_sent", outcome="TIMEOUT")

    # The writer holding the lower id outlasts the horizon's lock wait: no fold, the higher row
    # is counted from the journal above the watermark.
    assert _timeouts() == 1
    assert _watermark("event") == 0

    release.set()
    writer.join(30)
    assert _timeouts() == 2  # the lower id, committed late, is counted
    assert _watermark("event") > 0
    assert _timeouts() == 2  # and only once


@pytest.mark.django_db(transaction=True)
def test_a_scrape_waits_for_a_writer_that_commits_within_the_lock_timeout():
    TransactionEvent.objects.create(transaction_id="FIRST", kind="check_sent", outcome="TIMEOUT")
    assert _timeouts() == 1
    inserted, release = threading.Event(), threading.Event()
    writer = _start(_held_event("LOW", inserted, release))
    assert inserted.wait(30)
    TransactionEvent.objects.create(transaction_id="HIGH", kind="check_sent", outcome="TIMEOUT")

    found: list[float] = []
    scraper = _start(lambda: found.append(_timeouts()))
    time.sleep(HORIZON_LOCK_TIMEOUT_MS / 4000)
    release.set()
    writer.join(30)
    scraper.join(30)

    assert found == [3]  # the scrape waited for the writer, then folded both rows
    assert _watermark("event") == TransactionEvent.objects.latest("pk").pk
    assert _timeouts() == 3

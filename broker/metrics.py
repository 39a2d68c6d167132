"""Prometheus metrics, read from the database at scrape time.

Counting from the database keeps the figures exact across the web workers, the Celery workers
and restarts, with no multiprocess bookkeeping; what a scrape reads follows the present, not
the history (``broker.services.metrics`` folds the journals into a rollup,
``broker.selectors.metrics`` reads it). Names and buckets follow RocketMQ 5.2's RIP-46.

More: docs/design.md, "Module notes", broker/metrics.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from broker.conf import conf
from broker.constants import FINISH_LATENCY_BUCKETS_S
from broker.plumbing.database_status import (
    DATABASE_UNAVAILABLE_ERRORS,
    DATABASE_UNAVAILABLE_RESPONSES,
    DATABASE_UP,
)
from broker.rules.clock import now_ms
from broker.selectors.blocked_message_groups import blocked_message_group_counts
from broker.selectors.metrics import (
    EventCounts,
    event_counts,
    half_messages_by_topic,
    resolution_counts,
)
from broker.selectors.overview import oldest_pending_per_group, pending_check_times_by_group
from broker.selectors.reachability import GroupReachability, producer_group_reachability
from broker.selectors.scheduled_messages import scheduled_overdue_count, scheduled_waiting
from broker.selectors.topology import consumer_group_rows
from broker.services.metrics import metrics_fold

logger = logging.getLogger("halfmoon.metrics")


class BrokerCollector(Collector):
    """rocketmq_half_messages, rocketmq_commit_messages_total, rocketmq_rollback_messages_total,
    rocketmq_finish_message_latency (RIP-46), and halfmoon_checks_total{outcome},
    halfmoon_discarded_total{reason}, halfmoon_operator_actions_total{kind}; then the alerting
    families of ``alerting_families``; then ``halfmoon_database_up``, 1 when they were read, 0
    (and none of them) when the database did not answer."""

    def collect(self) -> Iterator[object]:
        try:
            # Read whole before the first is yielded: a scrape never serves half of them.
            families = list(self.database_families())
        except DATABASE_UNAVAILABLE_ERRORS as exc:
            logger.warning(
                "/metrics without the database's figures: %s: %s",
                type(exc).__name__,
                str(exc).strip() or "-",
            )
            families = []
            DATABASE_UP.set(0)
        else:
            DATABASE_UP.set(1)
        yield from families
        yield from DATABASE_UP.collect()

    def database_families(self) -> Iterator[object]:
        """Every family read from the database (the rollup folded first)."""
        metrics_fold()
        groups = producer_group_reachability()
        events = event_counts(producer_groups=[g.name for g in groups])
        yield _family(
            GaugeMetricFamily,
            "rocketmq_half_messages",
            "Half messages not yet resolved",
            "topic",
            half_messages_by_topic(),
        )
        resolved = resolution_counts()
        yield _family(
            CounterMetricFamily,
            "rocketmq_commit_messages",
            "Transactions committed",
            "topic",
            resolved.commits,
        )
        yield _family(
            CounterMetricFamily,
            "rocketmq_rollback_messages",
            "Transactions rolled back",
            "topic",
            resolved.rollbacks,
        )
        latency = HistogramMetricFamily(
            "rocketmq_finish_message_latency",
            "Time from half message to its end (commit or rollback), seconds",
            labels=["topic"],
        )
        for topic, totals in resolved.latency.items():
            buckets = [
                (str(b), c) for b, c in zip(FINISH_LATENCY_BUCKETS_S, totals.buckets, strict=True)
            ]
            buckets.append(("+Inf", totals.count))
            latency.add_metric([topic], buckets, sum_value=totals.sum_ms / 1000)
        yield latency

        yield _family(
            CounterMetricFamily,
            "halfmoon_checks",
            "Back-checks by outcome: the producer's answer (COMMIT_MESSAGE, ROLLBACK_MESSAGE, "
            "UNKNOW, ACCEPTED for 202, TIMEOUT, INVALID), POLLED (handed to a poller) or "
            "UNDELIVERED (not sent, not counted in check_times)",
            "outcome",
            events.checks,
        )
        yield _family(
            CounterMetricFamily,
            "halfmoon_discarded",
            "Transactions discarded by the check scan",
            "reason",
            events.discards,
        )
        yield _family(
            CounterMetricFamily,
            "halfmoon_operator_actions",
            "Operator resolutions, resumes and check-now requests",
            "kind",
            events.operator,
        )
        yield from alerting_families(groups, events)


def alerting_families(
    groups: list[GroupReachability], events: EventCounts
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The families Prometheus alerting rules read (``deploy/prometheus/halfmoon-alerts.yml``),
    per producer group (every group of ``groups``, a ``producer_group_reachability`` list) or
    consumer group, from the pending set, the groups, the consumer queues and the rollup
    (``events``, an ``event_counts`` of those groups).

    - ``halfmoon_pending_transactions{producer_group}``: PREPARED transactions (0 for a group
      with none).
    - ``halfmoon_pending_oldest_timestamp_seconds{producer_group}``: birth of its oldest
      PREPARED transaction (groups with any pending).
    - ``halfmoon_pending_max_check_times{producer_group}``: checks delivered to its most
      checked PREPARED transaction (groups with any pending), and
      ``halfmoon_transaction_check_max``, HALFMOON_TRANSACTION_CHECK_MAX.
    - ``halfmoon_producer_group_checks_total{producer_group,outcome}`` and
      ``halfmoon_producer_group_discarded_total{producer_group,reason}``: the check and discard
      counters split by group.
    - ``halfmoon_producer_group_reachable{producer_group}``: 1, or 0 while its checks do not get
      through (``broker.rules.checks.group_down_since``).
    - ``halfmoon_producer_group_last_answer_timestamp_seconds{producer_group}``: its latest
      answered check (``broker.rules.checks.check_answered``; groups with one).
    - ``halfmoon_consumer_group_lag{consumer_group,topic}`` and
      ``halfmoon_consumer_group_dlq_messages{consumer_group}`` (the consumer groups page's
      figures).
    - ``scheduled_families``: the delay and timer messages waiting, the earliest due time, how
      many are past it.
    - ``fifo_families``: the FIFO consumer groups' blocked message groups.
    """
    oldest = {row.producer_group: row for row in oldest_pending_per_group(now_ms())}
    names = sorted({g.name for g in groups} | set(oldest))
    pending = GaugeMetricFamily(
        "halfmoon_pending_transactions",
        "PREPARED transactions (half messages not yet ended) per producer group",
        labels=["producer_group"],
    )
    born = GaugeMetricFamily(
        "halfmoon_pending_oldest_timestamp_seconds",
        "Birth (Unix time, s) of the oldest PREPARED transaction of the producer group; its age "
        "is time() minus this",
        labels=["producer_group"],
    )
    for name in names:
        row = oldest.get(name)
        pending.add_metric([name], row.pending if row else 0)
        if row is not None:
            born.add_metric([name], row.born_timestamp / 1000)
    yield pending
    yield born
    most_checked = GaugeMetricFamily(
        "halfmoon_pending_max_check_times",
        "Checks delivered to the most checked PREPARED transaction of the producer group "
        "(discarded at halfmoon_transaction_check_max)",
        labels=["producer_group"],
    )
    for name, by_times in sorted(pending_check_times_by_group().items()):
        most_checked.add_metric([name], max(by_times))
    yield most_checked
    yield GaugeMetricFamily(
        "halfmoon_transaction_check_max",
        "HALFMOON_TRANSACTION_CHECK_MAX: checks delivered before a transaction is discarded",
        value=conf.transaction_check_max,
    )
    yield _group_family(
        "halfmoon_producer_group_checks",
        "Back-checks by producer group and outcome (halfmoon_checks_total split by group)",
        "outcome",
        events.group_checks,
    )
    yield _group_family(
        "halfmoon_producer_group_discarded",
        "Transactions discarded by the check scan, by producer group and reason",
        "reason",
        events.group_discards,
    )
    reachable = GaugeMetricFamily(
        "halfmoon_producer_group_reachable",
        "1 when the producer group's back-checks get through, 0 while they are undelivered or "
        "unanswered",
        labels=["producer_group"],
    )
    for group in groups:
        reachable.add_metric([group.name], 1 if group.reachable else 0)
    yield reachable
    answered = GaugeMetricFamily(
        "halfmoon_producer_group_last_answer_timestamp_seconds",
        "Unix time (s) of the producer group's latest answered back-check (any answer but a "
        "timeout, or a hand-out to a polling producer)",
        labels=["producer_group"],
    )
    for name, timestamp in sorted(events.last_answer.items()):
        answered.add_metric([name], timestamp / 1000)
    yield answered
    lag = GaugeMetricFamily(
        "halfmoon_consumer_group_lag",
        "Messages stored on the topic's queues that the consumer group has not taken yet",
        labels=["consumer_group", "topic"],
    )
    dlq = GaugeMetricFamily(
        "halfmoon_consumer_group_dlq_messages",
        "Messages on the consumer group's dead-letter topic %DLQ%{group}",
        labels=["consumer_group"],
    )
    rows = consumer_group_rows()
    for row in rows:
        for topic_lag in row.lags:
            lag.add_metric([row.group.name, topic_lag.topic], topic_lag.lag)
        dlq.add_metric([row.group.name], row.dlq)
    yield lag
    yield dlq
    yield from scheduled_families()
    yield from fifo_families(sorted(row.group.name for row in rows if row.group.fifo))


def fifo_families(fifo_groups: list[str]) -> Iterator[GaugeMetricFamily]:
    """``halfmoon_fifo_blocked_message_groups{consumer_group}``: message groups whose head has
    failed and holds back the rest (``broker.selectors.blocked_message_groups``; 0 for a FIFO
    group of ``fifo_groups`` with none); ``halfmoon_fifo_blocked_oldest_timestamp_seconds
    {consumer_group}``: the oldest one's first hand-out (groups with any, when known). RocketMQ
    (RIP-46) has no such figure."""
    counts = blocked_message_group_counts()
    blocked = GaugeMetricFamily(
        "halfmoon_fifo_blocked_message_groups",
        "Message groups of the FIFO consumer group whose head failed and holds back the rest",
        labels=["consumer_group"],
    )
    since = GaugeMetricFamily(
        "halfmoon_fifo_blocked_oldest_timestamp_seconds",
        "Unix time (s) since which the FIFO consumer group's oldest blocked message group "
        "blocks (its head's first hand-out); time() minus this is how long",
        labels=["consumer_group"],
    )
    for name in sorted(set(fifo_groups) | set(counts)):
        row = counts.get(name)
        blocked.add_metric([name], row.blocked if row else 0)
        if row is not None and row.oldest_since is not None:
            since.add_metric([name], row.oldest_since / 1000)
    yield blocked
    yield since


def scheduled_families() -> Iterator[GaugeMetricFamily]:
    """``halfmoon_scheduled_messages``: delay and timer messages waiting for their time;
    ``halfmoon_scheduled_next_due_timestamp_seconds``: the earliest one's due time (absent
    when none waits). Past due for long, the timer is not running or is behind."""
    counts = scheduled_waiting()
    yield GaugeMetricFamily(
        "halfmoon_scheduled_messages",
        "Delay and timer messages waiting for their time (SCHEDULED)",
        value=counts.waiting,
    )
    next_due = GaugeMetricFamily(
        "halfmoon_scheduled_next_due_timestamp_seconds",
        "Due time (Unix time, s) of the earliest scheduled message; time() minus this is how "
        "late the timer is when positive",
        labels=[],
    )
    if counts.next_due is not None:
        next_due.add_metric([], counts.next_due / 1000)
    yield next_due
    yield scheduled_overdue_family(counts.next_due)


def scheduled_overdue_family(next_due: int | None) -> GaugeMetricFamily:
    """``halfmoon_scheduled_overdue_messages``: SCHEDULED messages whose due time has passed
    (0 without reading when the earliest, ``next_due`` ms, is still ahead or none waits):
    what the timer has yet to move; above 0 for long, it is down or behind."""
    now = now_ms()
    overdue = scheduled_overdue_count(now) if next_due is not None and next_due < now else 0
    return GaugeMetricFamily(
        "halfmoon_scheduled_overdue_messages",
        "Delay and timer messages past their due time and not yet moved to their topic",
        value=overdue,
    )


def _group_family(
    name: str, documentation: str, label: str, values: Mapping[str, Mapping[str, int]]
) -> CounterMetricFamily:
    """A counter family with one sample per (producer group, ``label`` value)."""
    family = CounterMetricFamily(name, documentation, labels=["producer_group", label])
    for group, counts in sorted(values.items()):
        for value, n in sorted(counts.items()):
            family.add_metric([group, value], n)
    return family


def _family(
    cls: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    documentation: str,
    label: str,
    values: Mapping[str, int],
) -> GaugeMetricFamily | CounterMetricFamily:
    """A gauge or counter family with one sample per ``label`` value."""
    family = cls(name, documentation, labels=[label])
    for value, n in values.items():
        family.add_metric([value], n)
    return family


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(BrokerCollector())
REGISTRY.register(DATABASE_UNAVAILABLE_RESPONSES)

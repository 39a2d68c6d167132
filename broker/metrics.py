"""Prometheus metrics, computed from the database at scrape time.

Counting from the commit log's derived state keeps the figures exact across the web workers,
the Celery workers and restarts, with no multiprocess bookkeeping. Names and buckets follow
RocketMQ 5.2's RIP-46.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db import connection
from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from broker.constants import FINISH_LATENCY_BUCKETS_S
from broker.models import Transaction, TransactionEvent, TransactionState

# Labels present from the first scrape, at 0, so rates and alerts work before the first event.
CHECK_OUTCOMES = (
    "COMMIT_MESSAGE",
    "ROLLBACK_MESSAGE",
    "UNKNOW",
    "ACCEPTED",
    "TIMEOUT",
    "INVALID",
    "POLLED",
    "UNDELIVERED",
)
DISCARD_REASONS = ("check_max", "file_reserved_time")
OPERATOR_ACTIONS = ("resolved:COMMIT", "resolved:ROLLBACK", "resumed")


class BrokerCollector(Collector):
    """rocketmq_half_messages, rocketmq_commit_messages_total, rocketmq_rollback_messages_total,
    rocketmq_finish_message_latency (RIP-46), and halfmoon_checks_total{outcome},
    halfmoon_discarded_total{reason}, halfmoon_operator_actions_total{kind}."""

    def collect(self) -> Iterator[object]:
        half = GaugeMetricFamily(
            "rocketmq_half_messages", "Half messages not yet resolved", labels=["topic"]
        )
        commits = CounterMetricFamily(
            "rocketmq_commit_messages", "Transactions committed", labels=["topic"]
        )
        rollbacks = CounterMetricFamily(
            "rocketmq_rollback_messages", "Transactions rolled back", labels=["topic"]
        )
        rows = Transaction.objects.values_list("topic", "state").annotate(n=Count("pk"))
        for topic, state, n in rows:
            if state == TransactionState.PREPARED:
                half.add_metric([topic], n)
            elif state == TransactionState.COMMITTED:
                commits.add_metric([topic], n)
            elif state == TransactionState.ROLLED_BACK:
                rollbacks.add_metric([topic], n)
        yield half
        yield commits
        yield rollbacks
        yield self._latency()

        checks = CounterMetricFamily(
            "halfmoon_checks",
            "Back-checks by outcome: the producer's answer (COMMIT_MESSAGE, ROLLBACK_MESSAGE, "
            "UNKNOW, ACCEPTED for 202, TIMEOUT, INVALID), POLLED (handed to a poller) or "
            "UNDELIVERED (not sent, not counted in check_times)",
            labels=["outcome"],
        )
        discarded = CounterMetricFamily(
            "halfmoon_discarded", "Transactions discarded by the check scan", labels=["reason"]
        )
        operator = CounterMetricFamily(
            "halfmoon_operator_actions", "Operator resolutions and resumes", labels=["kind"]
        )
        check_counts = dict.fromkeys(CHECK_OUTCOMES, 0)
        discard_counts = dict.fromkeys(DISCARD_REASONS, 0)
        operator_counts = dict.fromkeys(OPERATOR_ACTIONS, 0)
        rows = (
            TransactionEvent.objects.values_list("kind", "outcome")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for kind, outcome, n in rows:
            if kind in (TransactionEvent.Kind.CHECK_SENT, TransactionEvent.Kind.CHECK_UNDELIVERED):
                check_counts[outcome] = check_counts.get(outcome, 0) + n
            elif kind == TransactionEvent.Kind.DISCARDED:
                discard_counts[outcome] = discard_counts.get(outcome, 0) + n
            else:
                label = f"{kind}:{outcome}" if outcome else kind
                operator_counts[label] = operator_counts.get(label, 0) + n
        for outcome, n in check_counts.items():
            checks.add_metric([outcome], n)
        for reason, n in discard_counts.items():
            discarded.add_metric([reason], n)
        for label, n in operator_counts.items():
            operator.add_metric([label], n)
        yield checks
        yield discarded
        yield operator

    def _latency(self) -> HistogramMetricFamily:
        """Seconds from half message to commit or rollback, per topic (one aggregate query)."""
        cases = ", ".join(
            f"SUM(CASE WHEN resolved_timestamp - born_timestamp <= {int(b * 1000)} THEN 1 ELSE 0 END)"
            for b in FINISH_LATENCY_BUCKETS_S
        )
        sql = (
            f"SELECT topic, COUNT(*), SUM(resolved_timestamp - born_timestamp), {cases} "
            "FROM broker_transaction WHERE state IN ('COMMITTED', 'ROLLED_BACK') GROUP BY topic"
        )
        family = HistogramMetricFamily(
            "rocketmq_finish_message_latency",
            "Time from half message to its end (commit or rollback), seconds",
            labels=["topic"],
        )
        with connection.cursor() as cursor:
            cursor.execute(sql)
            for topic, count, total_ms, *cumulative in cursor.fetchall():
                buckets = [
                    (str(b), int(c or 0))
                    for b, c in zip(FINISH_LATENCY_BUCKETS_S, cumulative, strict=True)
                ]
                buckets.append(("+Inf", int(count)))
                family.add_metric([topic], buckets, sum_value=(total_ms or 0) / 1000)
        return family


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(BrokerCollector())

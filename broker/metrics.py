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


class BrokerCollector(Collector):
    """rocketmq_half_messages, rocketmq_commit_messages_total, rocketmq_rollback_messages_total,
    rocketmq_finish_message_latency, and halfmoon_checks_total / halfmoon_discarded_total."""

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
            "Back-checks by outcome: sent (delivered) or undelivered",
            labels=["outcome"],
        )
        discarded = CounterMetricFamily(
            "halfmoon_discarded", "Transactions discarded by the check scan"
        )
        counts = dict(TransactionEvent.objects.values_list("kind").annotate(n=Count("pk")))
        checks.add_metric(["sent"], counts.get(TransactionEvent.Kind.CHECK_SENT, 0))
        checks.add_metric(["undelivered"], counts.get(TransactionEvent.Kind.CHECK_UNDELIVERED, 0))
        discarded.add_metric([], counts.get(TransactionEvent.Kind.DISCARDED, 0))
        yield checks
        yield discarded

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

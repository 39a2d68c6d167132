"""Prometheus metrics, read from the database at scrape time.

Counting from the database keeps the figures exact across the web workers, the Celery workers
and restarts, with no multiprocess bookkeeping; what a scrape reads follows the present, not
the history (``broker.services.metrics`` folds the journals into a rollup,
``broker.selectors_metrics`` reads it). Names and buckets follow RocketMQ 5.2's RIP-46.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from broker.constants import FINISH_LATENCY_BUCKETS_S
from broker.selectors_metrics import event_counts, half_messages_by_topic, resolution_counts
from broker.services.metrics import metrics_fold


class BrokerCollector(Collector):
    """rocketmq_half_messages, rocketmq_commit_messages_total, rocketmq_rollback_messages_total,
    rocketmq_finish_message_latency (RIP-46), and halfmoon_checks_total{outcome},
    halfmoon_discarded_total{reason}, halfmoon_operator_actions_total{kind}."""

    def collect(self) -> Iterator[object]:
        metrics_fold()
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

        events = event_counts()
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

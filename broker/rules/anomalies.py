"""The reconciliation's rules, pure: the anomaly kinds, the bucket size and when a transaction
must have settled. The Spark job (``broker.pipeline.reconcile``), the one-process baselines
(``bench/reconcile_same_work.py``, ``bench/reconcile_baseline.py``), the API and the console read
them from here.

Sources: RocketMQ's transaction check (``TransactionalMessageCheckService``: transactionTimeOut,
transactionCheckInterval, transactionCheckMax, fileReservedTime) and a hand-built
reconciliation of half and ended msgIds (the set of half msgIds against the set of ended ones,
per time bucket).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.rules.choices import TextChoices

# The set difference of half and ended msgIds is taken per producer group and 10-minute bucket
# of half time.
BUCKET_MS = 10 * 60 * 1000
HOUR_MS = 60 * 60 * 1000


class AnomalyKind(TextChoices):
    """What the reconciliation can find; each anomaly names its transaction (or msg_id)."""

    HANGING = "hanging", "PREPARED past the check max or the reserved time without a discard"
    LOST_COMMIT = "lost_commit", "resolved as committed, but no delivered message"
    ROLLED_BACK_BUT_DELIVERED = (
        "rolled_back_but_delivered",
        "resolved as rolled back (or discarded), yet delivered on its topic",
    )
    ORPHAN_DELIVERY = (
        "orphan_delivery",
        "a delivered transactional message with no half message or no commit",
    )
    DOUBLE_RESOLUTION = "double_resolution", "a half message resolved more than once"
    DUPLICATE_DELIVERY = "duplicate_delivery", "one commit delivered twice on its topic"
    LATE_END = "late_end", "an end from the producer or a check that arrived after the discard"
    UNDELIVERED_TO_GROUP = (
        "undelivered_to_group",
        "committed, but never delivered to a consumer group that consumed past it",
    )
    SLOW_VISIBILITY = "slow_visibility", "end-to-visible time over HALFMOON_VISIBILITY_SLA_MS"
    BUCKET_MISMATCH = (
        "bucket_mismatch",
        "a producer group's 10-minute bucket whose half messages and final states disagree",
    )
    SCHEDULED_UNDELIVERED = (
        "scheduled_undelivered",
        "a delay or timer message neither delivered nor recalled by its due time plus the "
        "settle time",
    )


@dataclass(frozen=True)
class ReconcileParams:
    """What one reconciliation run judges and by which settings (all times in ms since the
    epoch, durations in ms).

    ``since_ms``/``until_ms``: the window of half message store times judged (transactions
    born in it). ``as_of_ms``: how far the archive reaches (its watermark); logs up to it are
    read, so an end or delivery after ``until_ms`` still counts. The broker's settings are
    copied in (``broker.conf``) so the job needs no Django on the executors.
    """

    since_ms: int
    until_ms: int
    as_of_ms: int
    transaction_check_max: int
    transaction_check_interval_ms: int
    transaction_timeout_ms: int
    file_reserved_ms: int
    visibility_sla_ms: int
    check_scan_interval_ms: int

    @property
    def settle_ms(self) -> int:
        """How long after its half message a transaction must be final (ms): ``settle_ms``."""
        return settle_ms(self)


def settle_ms(params: ReconcileParams) -> int:
    """How long after its half message a transaction of a reachable producer group must be
    final (ms): its check immunity (transactionTimeOut), ``check max + 1`` check intervals (the
    last check, then the scan that discards it), and two scan intervals of slack. A transaction
    born later than ``as_of_ms - settle_ms`` may legitimately still be PREPARED."""
    return (
        params.transaction_timeout_ms
        + (params.transaction_check_max + 1) * params.transaction_check_interval_ms
        + 2 * params.check_scan_interval_ms
    )


def scheduled_grace_ms(params: ReconcileParams) -> int:
    """How long after its due time a scheduled (delay or timer) message must be on its topic
    (ms): the run's ``settle_ms``, so a timer that is down or behind for less than a
    transaction's settle time is not called a loss."""
    return settle_ms(params)


def scheduled_undelivered(
    delivery_timestamp: int, *, delivered: bool, recalled: bool, params: ReconcileParams
) -> bool:
    """Whether a scheduled message stored on ``RMQ_SYS_WHEEL_TIMER`` and due at
    ``delivery_timestamp`` (ms) is a ``scheduled_undelivered`` anomaly of the run ``params``:
    it is due in ``[since_ms, until_ms)`` (each due time is judged by one run of consecutive
    windows), its due time plus ``scheduled_grace_ms`` is at or before ``as_of_ms``, and the
    archive holds neither its copy on its topic (``delivered``) nor a recall's delete marker
    (``recalled``; RocketMQ ``TIMER_DEL_UNIQKEY``). The job and the baselines apply this rule
    in SQL; this is its one statement, pinned by the rules' tests."""
    return (
        params.since_ms <= delivery_timestamp < params.until_ms
        and delivery_timestamp + scheduled_grace_ms(params) <= params.as_of_ms
        and not delivered
        and not recalled
    )


def bucket_start(timestamp_ms: int) -> int:
    """The start (ms) of the 10-minute bucket holding ``timestamp_ms``."""
    return timestamp_ms - timestamp_ms % BUCKET_MS


def segment_ms_valid(segment_ms: int) -> bool:
    """An archive segment never spans two hours (the archive is partitioned by date and hour):
    its length must divide an hour."""
    return 0 < segment_ms <= HOUR_MS and HOUR_MS % segment_ms == 0

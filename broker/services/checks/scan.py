"""The back-check scan of a half queue (RocketMQ ``TransactionalMessageCheckService`` and
``TransactionalMessageServiceImpl.check``): beat fans it out per half queue
(``half_queue_scans_dispatch``), each scan holds the queue's lease and runs check rounds
(``check_round``: claim, send over HTTP or telemetry, apply) within ``MAX_PROCESS_TIME_LIMIT``
(``HALFMOON_CHECK_MAX_PROCESS_TIME_MS``), then flushes the queue's Op journal and advances its
checkpoints.

The steps are looked up as this module's attributes when called, so ``bench/scan_cost.py`` can
time each of them by wrapping it here.
"""

from __future__ import annotations

import logging
from time import monotonic

from celery import current_app

from broker.conf import conf
from broker.plumbing.leases import LeaseKeeper, lease_acquire, lease_owner, lease_release
from broker.rules.checks import scan_lease_ttl_ms
from broker.rules.clock import now_ms
from broker.services.checks.checkpoint import checkpoint_advance
from broker.services.checks.claim import check_claim
from broker.services.checks.outcomes import check_outcomes_apply
from broker.services.checks.payload import CheckJob, CheckOutcome
from broker.services.checks.telemetry import telemetry_checks_send
from broker.services.checks.transport import checks_send
from broker.services.transactions.op_messages import op_flush

logger = logging.getLogger("halfmoon.checks")

HALF_QUEUE_SCAN_TASK = "tasks.checks.check_half_queue"
SCAN_TASK_EXPIRES_INTERVALS = 2
"""A queued scan task expires after this many scan intervals: a scan that could not start by
then is superseded by a later beat tick's, so slow scans never pile up behind themselves."""


def checks_deliver(jobs: list[CheckJob]) -> list[CheckOutcome]:
    """Step 2 of a round: send each job by its channel, the HTTP ones POSTed (``checks_send``),
    then the telemetry ones written on gRPC clients' streams
    (``telemetry_checks_send``). Returns one outcome per job (HTTP ones first, then telemetry
    ones, each in the jobs' order). Never inside a database transaction."""
    outcomes = checks_send([job for job in jobs if job.channel == "http"])
    outcomes += telemetry_checks_send([job for job in jobs if job.channel == "telemetry"])
    return outcomes


def check_round(*, half_queue_id: int, due_by: int | None = None) -> dict[str, int]:
    """One back-check round on a half queue: claim, send (POSTed to webhooks, written on the
    telemetry streams of gRPC clients), apply (``due_by`` as in ``check_claim``).

    Returns counts: ``due`` (transactions handled: checked, queued or discarded), ``sent``
    (HTTP and telemetry checks), ``delivered``, ``undelivered``, ``committed``, ``rolled_back``.
    """
    jobs, due = check_claim(half_queue_id=half_queue_id, due_by=due_by)
    outcomes = checks_deliver(jobs)
    check_outcomes_apply(outcomes)
    return {
        "due": due,
        "sent": len(jobs),
        "delivered": sum(o.delivered for o in outcomes),
        "undelivered": sum(not o.delivered for o in outcomes),
        "committed": sum(o.action == "commit" for o in outcomes),
        "rolled_back": sum(o.action == "rollback" for o in outcomes),
    }


def half_queue_scan_lease_name(half_queue_id: int) -> str:
    """The ``ScanLease`` name of a half queue's scan: ``check:<queue id>``."""
    return f"check:{half_queue_id}"


def half_queue_scan(*, half_queue_id: int) -> dict[str, int] | None:
    """Scan one half queue (RocketMQ ``check()`` of one message queue).

    Takes the queue's lease (``broker.rules.checks.scan_lease_ttl_ms``: half the check
    interval) and keeps it with a ``LeaseKeeper`` heartbeat however long the rounds take, so no
    other scan claims the queue's transactions before this one has counted the checks it sent.
    Runs check rounds while they find transactions that were due when the scan started (a
    round takes at most one batch, and at most ``HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT`` of a
    group; what falls due meanwhile waits for the next scan), until the time budget
    ``HALFMOON_CHECK_MAX_PROCESS_TIME_MS`` (MAX_PROCESS_TIME_LIMIT) is spent or the lease is
    lost. Then flushes the queue's Op journal (``op_flush``: beat's flush tasks can wait behind
    long rounds in a busy pool, and the checkpoint only passes offsets the Op log names) and
    advances its checkpoints (``checkpoint_advance``). Releases the lease if still held.

    Returns the summed round counts (see ``check_round``; empty if the scan did not get as far
    as a round), or None if another worker holds the queue's lease (a scan still running is
    never started twice).
    """
    name = half_queue_scan_lease_name(half_queue_id)
    owner = lease_owner()
    ttl_ms = scan_lease_ttl_ms(
        check_interval_ms=conf.transaction_check_interval_ms,
        scan_interval_ms=conf.check_scan_interval_ms,
    )
    if not lease_acquire(name=name, owner=owner, ttl_ms=ttl_ms):
        return None
    keeper = LeaseKeeper(name=name, owner=owner, ttl_ms=ttl_ms)
    keeper.start()
    deadline = monotonic() + conf.check_max_process_time_ms / 1000
    started = now_ms()
    totals: dict[str, int] = {}
    try:
        while not keeper.lost:
            counts = check_round(half_queue_id=half_queue_id, due_by=started)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            if counts["due"] == 0 or monotonic() > deadline:
                break
            if not lease_acquire(name=name, owner=owner, ttl_ms=ttl_ms):
                break  # the lease expired and another worker took the queue over
        op_flush(half_queue_id=half_queue_id)
        checkpoint_advance(half_queue_id=half_queue_id)
    finally:
        keeper.stop()
        lease_release(name=name, owner=owner)
    if totals.get("due"):
        logger.info("half queue %d: %s", half_queue_id, totals)
    return totals


def half_queue_scans_dispatch() -> int:
    """Queue one scan task (``tasks.checks.check_half_queue``) per half queue, each expiring
    after ``SCAN_TASK_EXPIRES_INTERVALS`` scan intervals (``conf.check_scan_interval_s``, the
    beat period of this dispatch). Returns how many were queued (``HALFMOON_HALF_QUEUE_NUMS``).
    """
    expires_s = SCAN_TASK_EXPIRES_INTERVALS * conf.check_scan_interval_s
    queues = conf.half_queue_nums
    for half_queue_id in range(queues):
        current_app.send_task(HALF_QUEUE_SCAN_TASK, args=[half_queue_id], expires=expires_s)
    return queues

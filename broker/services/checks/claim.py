"""Step 1 of a check round: claim the due half messages of one half queue (RocketMQ
``TransactionalMessageServiceImpl.check``: the due test, ``needDiscard``, ``needSkip``, and
``putBackHalfMsgQueue``'s "check again one interval later", here a moved
``next_check_timestamp``)."""

from __future__ import annotations

import json
import logging

from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from halfmoon_client.signing import sign_check_body

from broker.conf import conf
from broker.models import CheckRequest, Message, ProducerGroup, Transaction
from broker.plumbing.wakeups import check_requests_channel, wakeup_on_commit
from broker.rules.checks import discard_reason, next_check_after_check
from broker.rules.clock import now_ms
from broker.rules.states import TransactionState
from broker.services.checks.payload import CheckJob, check_payload
from broker.services.checks.rate_limit import check_rate_limit
from broker.services.transactions.resolution import transaction_discard

logger = logging.getLogger("halfmoon.checks")


def check_claim(
    *, half_queue_id: int, now: int | None = None, due_by: int | None = None
) -> tuple[list[CheckJob], int]:
    """Lock the due transactions of ``half_queue_id``, discard, lease one interval ahead, queue.

    In one database transaction: lock (``SKIP LOCKED``) the PREPARED transactions whose
    ``next_check_timestamp`` has passed, at most ``HALFMOON_CHECK_BATCH_SIZE`` and at most
    ``HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT`` of one producer group (so a group with thousands due
    cannot crowd out the others), none of a group in backoff. Each is discarded when
    ``broker.rules.checks.discard_reason`` says so (needSkip: older than
    ``HALFMOON_FILE_RESERVED_HOURS``; needDiscard: ``HALFMOON_TRANSACTION_CHECK_MAX`` checks
    delivered); the others' next check moves one check interval ahead (so no other worker takes
    them), and groups that poll get a ``CheckRequest`` (a half message sent over gRPC,
    ``producer_client_id`` set, gets a telemetry check whatever its group's ``check_url``).
    Then, outside the transaction,
    ``check_rate_limit`` holds back what exceeds the group's rate.

    ``now`` (ms) defaults to the clock read once the transaction is open; ``due_by`` (ms) limits
    the claim to transactions due by then (a scan passes its start time, so it handles what was
    due when it began and then ends).

    Due transactions are taken oldest first: by next check time, ties in the order their half
    messages were stored (commit log offset).

    Returns (the checks to send, HTTP and telemetry, how many due transactions were handled).
    """
    interval = conf.transaction_check_interval_ms
    per_group = conf.check_group_max_in_flight
    jobs: list[CheckJob] = []
    with transaction.atomic():
        # Read the clock once the transaction is open.
        now = now if now is not None else now_ms()
        cutoff = now if due_by is None else min(now, due_by)
        backed_off = ProducerGroup.objects.filter(check_backoff_until__gt=now).values_list(
            "name", flat=True
        )
        candidates = (
            Transaction.objects.filter(
                state=TransactionState.PREPARED,
                half_queue_id=half_queue_id,
                next_check_timestamp__lte=cutoff,
            )
            .exclude(producer_group__in=backed_off)
            .annotate(
                rank=Window(
                    RowNumber(),
                    partition_by=[F("producer_group")],
                    order_by=[F("next_check_timestamp").asc(), F("half_commit_log_offset").asc()],
                )
            )
            .filter(rank__lte=per_group)
            .order_by("next_check_timestamp", "half_commit_log_offset")
            .values_list("pk", flat=True)[: conf.check_batch_size]
        )
        due = list(
            Transaction.objects.select_for_update(skip_locked=True)
            .filter(
                pk__in=list(candidates),
                state=TransactionState.PREPARED,
                half_queue_id=half_queue_id,
                next_check_timestamp__lte=cutoff,
            )
            .order_by("next_check_timestamp", "half_commit_log_offset")
        )
        if not due:
            return jobs, 0
        groups = ProducerGroup.objects.in_bulk({tx.producer_group for tx in due}, field_name="name")
        halves = Message.objects.in_bulk([tx.half_commit_log_offset for tx in due])
        queued = set(
            CheckRequest.objects.filter(
                transaction__in=[tx.pk for tx in due], delivered_timestamp__isnull=True
            ).values_list("transaction_id", flat=True)
        )
        leased: list[Transaction] = []
        unreachable: set[str] = set()
        for tx in due:
            reason = discard_reason(
                check_times=tx.check_times,
                born_timestamp=tx.born_timestamp,
                now=now,
                transaction_check_max=conf.transaction_check_max,
                file_reserved_hours=conf.file_reserved_hours,
            )
            if reason is not None:
                transaction_discard(tx, reason=reason)
                continue
            tx.next_check_timestamp = next_check_after_check(now, check_interval_ms=interval)
            leased.append(tx)
            group = groups.get(tx.producer_group)
            if group is None:
                logger.warning("producer group %s of %s is gone", tx.producer_group, tx.pk)
            elif tx.producer_client_id:  # sent over gRPC: checked over telemetry
                jobs.append(_telemetry_job(tx))
            elif group.check_url:
                jobs.append(_check_job(tx, group, halves[tx.half_commit_log_offset]))
            elif tx.pk in queued:
                # Its last request waited a whole interval and no producer polled for it.
                unreachable.add(group.name)
            else:
                CheckRequest.objects.create(
                    transaction=tx, producer_group=group.name, created_timestamp=now
                )
                wakeup_on_commit(check_requests_channel(group.name))  # its pollers
        Transaction.objects.bulk_update(leased, ["next_check_timestamp"])
        if unreachable:
            ProducerGroup.objects.filter(
                name__in=unreachable, unreachable_since__isnull=True
            ).update(unreachable_since=now)
            ProducerGroup.objects.filter(name__in=unreachable).update(
                last_check_error="no producer polled for check requests"
            )
    return check_rate_limit(jobs, now=now), len(due)


def _telemetry_job(tx: Transaction) -> CheckJob:
    """The next check of ``tx``, a half message sent over gRPC, for its client's telemetry
    stream (``broker.services.checks.telemetry``)."""
    return CheckJob(
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        check_times=tx.check_times + 1,
        channel="telemetry",
        client_id=tx.producer_client_id,
        topic=tx.topic,
        commit_log_offset=tx.half_commit_log_offset,
    )


def _check_job(tx: Transaction, group: ProducerGroup, half: Message) -> CheckJob:
    """The signed POST of the next check of ``tx`` to ``group``'s check URL."""
    check_times = tx.check_times + 1
    body = json.dumps(check_payload(tx, half, check_times), separators=(",", ":")).encode()
    return CheckJob(
        transaction_id=tx.transaction_id,
        producer_group=group.name,
        check_url=group.check_url,
        signature=sign_check_body(group.check_secret, body),
        body=body,
        check_times=check_times,
    )

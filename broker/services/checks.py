"""Back-checks: ask a producer of the group about a PREPARED transaction
(RocketMQ TransactionalMessageCheckService, TransactionalMessageServiceImpl.check,
AbstractTransactionalMessageCheckListener.resolveHalfMsg).

A check round on one half queue has three steps, and only the middle one touches the network:
1. ``check_claim``: in one database transaction, lock the due PREPARED transactions
   (``SKIP LOCKED``; at most ``HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT`` per producer group, none of
   a group in backoff), discard those past ``HALFMOON_TRANSACTION_CHECK_MAX`` or
   ``HALFMOON_FILE_RESERVED_HOURS``, push the others' next check one interval ahead (so no
   other worker takes them) and queue check requests for groups that poll. Then, outside the
   transaction, hold back what exceeds the group's ``HALFMOON_CHECK_GROUP_MAX_PER_SECOND``.
2. ``checks_send``: POST the signed checks in parallel (httpx), outside any database transaction.
3. ``check_outcomes_apply``: count delivered checks, apply COMMIT/ROLLBACK answers through
   ``transaction_end``, retry undelivered checks with backoff without counting them, and back a
   group off when its producers time out or cannot be reached.

``checkpoint_advance`` moves the scan checkpoints of ``CID_RMQ_SYS_TRANS`` over the done prefix
of the half queue and the contiguous done prefix of its Op queue, as RocketMQ's ``check()``
does; the due checks themselves are found through the PREPARED rows' index, so a round's cost
follows the pending transactions, never the history.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx
import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Window
from django.db.models.functions import RowNumber

from broker.conf import conf
from broker.constants import CHECK_GROUP, HALF_TOPIC, OP_HALF_TOPIC, RESERVED_PROPERTIES
from broker.errors import HalfmoonError
from broker.models import (
    CheckRequest,
    ConsumeQueue,
    ConsumerOffset,
    Message,
    ProducerGroup,
    Resolution,
    Transaction,
    TransactionEvent,
    TransactionState,
    now_ms,
)
from broker.rules.states import DiscardReason
from broker.services.transactions import (
    transaction_announce,
    transaction_discard,
    transaction_end,
)
from broker.signing import SIGNATURE_HEADER, sign_check_body

logger = logging.getLogger("halfmoon.checks")

CHECK_STATES = {
    "COMMIT_MESSAGE": "commit",
    "ROLLBACK_MESSAGE": "rollback",
    "UNKNOW": "unknown",
    "UNKNOWN": "unknown",
}


def check_payload(tx: Transaction, half: Message, check_times: int) -> dict[str, Any]:
    """The back-check body of api-v1: the half message as the producer sent it, with
    ``check_times`` counting this check (1 on the first)."""
    user_props = {k: v for k, v in half.properties.items() if k not in RESERVED_PROPERTIES}
    payload: dict[str, Any] = {
        "transaction_id": tx.transaction_id,
        "msg_id": tx.transaction_id,
        "producer_group": tx.producer_group,
        "topic": tx.topic,
        "tags": tx.tags,
        "keys": tx.keys,
        "properties": user_props,
        "check_times": check_times,
        "commit_log_offset": tx.half_commit_log_offset,
        "half_queue_offset": tx.half_queue_offset,
        "born_timestamp": tx.born_timestamp,
    }
    body = bytes(half.body)
    if half.body_is_text:
        payload["body"] = body.decode("utf-8")
    else:
        payload["body_base64"] = base64.b64encode(body).decode("ascii")
    return payload


@dataclass(frozen=True)
class CheckJob:
    """One back-check to POST: the raw JSON body is what gets signed."""

    transaction_id: str
    producer_group: str
    check_url: str
    signature: str
    body: bytes
    check_times: int


@dataclass(frozen=True)
class CheckOutcome:
    """What came of one CheckJob.

    ``delivered`` is False only when the request never reached the producer (connection
    refused, connect timeout): such a check is not counted. ``action`` is commit, rollback or
    unknown (UNKNOW, a timeout after sending, any other answer), or None for 202 Accepted
    (the producer will call end with from_transaction_check=true).
    """

    job: CheckJob
    delivered: bool
    action: str | None
    status_code: int | None = None
    error: str = ""
    answer: str = ""  # COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW, ACCEPTED, TIMEOUT or INVALID
    timed_out: bool = False

    @property
    def label(self) -> str:
        """What the producer answered, as recorded in the check journal and the metrics."""
        if self.answer:
            return self.answer
        return {"commit": "COMMIT_MESSAGE", "rollback": "ROLLBACK_MESSAGE", None: "ACCEPTED"}.get(
            self.action, "UNKNOW"
        )


def check_claim(
    *, half_queue_id: int, now: int | None = None, due_by: int | None = None
) -> tuple[list[CheckJob], int]:
    """Step 1 of a round on ``half_queue_id``: lock due transactions, discard, lease, queue.

    ``due_by`` (ms) limits the claim to transactions due by then (a scan passes its start time,
    so it handles what was due when it began and then ends). Returns (the HTTP checks to send,
    how many due transactions were handled). At most
    ``HALFMOON_CHECK_BATCH_SIZE`` transactions per call, and at most
    ``HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT`` of one producer group, so a group with thousands of
    due transactions cannot crowd out the others; groups in backoff (their producers timed out
    or could not be reached) are left for later. Discards past ``transactionCheckMax``
    (RocketMQ ``needDiscard``) and past ``fileReservedTime`` (``needSkip``).
    """
    interval = conf.transaction_check_interval_ms
    check_max = conf.transaction_check_max
    reserved_ms = conf.file_reserved_hours * 3_600_000
    per_group = conf.check_group_max_in_flight
    jobs: list[CheckJob] = []
    with transaction.atomic():
        # Read the clock once the transaction is open (on SQLite, once the write lock is held).
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
                    order_by=F("next_check_timestamp").asc(),
                )
            )
            .filter(rank__lte=per_group)
            .order_by("next_check_timestamp")
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
            .order_by("next_check_timestamp")
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
            if now - tx.born_timestamp > reserved_ms:
                transaction_discard(tx, reason=DiscardReason.FILE_RESERVED_TIME)
                continue
            if tx.check_times >= check_max:
                transaction_discard(tx, reason=DiscardReason.CHECK_MAX)
                continue
            tx.next_check_timestamp = now + interval
            leased.append(tx)
            group = groups.get(tx.producer_group)
            if group is None:
                logger.warning("producer group %s of %s is gone", tx.producer_group, tx.pk)
                continue
            if group.check_url:
                body = json.dumps(
                    check_payload(tx, halves[tx.half_commit_log_offset], tx.check_times + 1),
                    separators=(",", ":"),
                ).encode()
                jobs.append(
                    CheckJob(
                        transaction_id=tx.transaction_id,
                        producer_group=group.name,
                        check_url=group.check_url,
                        signature=sign_check_body(group.check_secret, body),
                        body=body,
                        check_times=tx.check_times + 1,
                    )
                )
            elif tx.pk in queued:
                # Its last request waited a whole interval and no producer polled for it.
                unreachable.add(group.name)
            else:
                CheckRequest.objects.create(
                    transaction=tx, producer_group=group.name, created_timestamp=now
                )
        Transaction.objects.bulk_update(leased, ["next_check_timestamp"])
        if unreachable:
            ProducerGroup.objects.filter(
                name__in=unreachable, unreachable_since__isnull=True
            ).update(unreachable_since=now)
            ProducerGroup.objects.filter(name__in=unreachable).update(
                last_check_error="no producer polled for check requests"
            )
    return _rate_limited(jobs, now=now), len(due)


def _redis() -> redis.Redis:
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return _redis_client


_redis_client: redis.Redis | None = None


def _rate_limited(jobs: list[CheckJob], *, now: int) -> list[CheckJob]:
    """Keep at most ``HALFMOON_CHECK_GROUP_MAX_PER_SECOND`` checks per producer group per second,
    counted across every worker in Redis (a fixed one-second window). The rest are held back,
    not sent and not counted, and become due again a second later."""
    limit = conf.check_group_max_per_second
    by_group: dict[str, list[CheckJob]] = {}
    for job in jobs:
        by_group.setdefault(job.producer_group, []).append(job)
    kept: list[CheckJob] = []
    held: list[str] = []
    window = now // 1000
    for group, group_jobs in by_group.items():
        key = f"halfmoon:check-rate:{group}:{window}"
        try:
            pipe = _redis().pipeline()
            pipe.incrby(key, len(group_jobs))
            pipe.expire(key, 5)
            used = int(pipe.execute()[0])
        except redis.RedisError:
            logger.warning(
                "check rate of %s not counted: Redis did not answer", group, exc_info=True
            )
            kept.extend(group_jobs)
            continue
        allowed = max(0, limit - (used - len(group_jobs)))
        kept.extend(group_jobs[:allowed])
        held.extend(job.transaction_id for job in group_jobs[allowed:])
    if held:
        Transaction.objects.filter(pk__in=held, state=TransactionState.PREPARED).update(
            next_check_timestamp=now + 1000
        )
        logger.info("held back %d checks over the per-group rate", len(held))
    return kept


def _parse_answer(response: httpx.Response) -> tuple[str | None, str]:
    """The action a check answer asks for and its label: 202 -> (None, ACCEPTED); 200 with a
    valid state -> that action; anything else -> (unknown, INVALID), logged with the answer
    (strict parsing: only the three states of api-v1, and UNKNOWN for UNKNOW)."""
    if response.status_code == 202:
        return None, "ACCEPTED"
    if response.status_code == 200:
        try:
            state = response.json().get("state")
        except (ValueError, AttributeError):
            state = None
        if isinstance(state, str) and state in CHECK_STATES:
            return CHECK_STATES[state], "UNKNOW" if state == "UNKNOWN" else state
    logger.warning(
        "check answer counted as UNKNOW: HTTP %s %r", response.status_code, response.text[:200]
    )
    return "unknown", "INVALID"


async def _send_all(jobs: list[CheckJob]) -> list[CheckOutcome]:
    timeout_s = conf.check_request_timeout_ms / 1000
    limit = asyncio.Semaphore(conf.check_concurrency)

    async def send(client: httpx.AsyncClient, job: CheckJob) -> CheckOutcome:
        async with limit:
            try:
                response = await client.post(
                    job.check_url,
                    content=job.body,
                    headers={"Content-Type": "application/json", SIGNATURE_HEADER: job.signature},
                )
            except (
                httpx.ConnectError,
                httpx.ConnectTimeout,
                httpx.PoolTimeout,
                httpx.UnsupportedProtocol,
                httpx.InvalidURL,
            ) as exc:
                return CheckOutcome(
                    job, delivered=False, action=None, error=f"{type(exc).__name__}: {exc}"
                )
            except httpx.TimeoutException as exc:  # sent, then no answer in time: UNKNOW
                return CheckOutcome(
                    job,
                    delivered=True,
                    action="unknown",
                    error=f"{type(exc).__name__}: {exc}",
                    answer="TIMEOUT",
                    timed_out=True,
                )
            except httpx.HTTPError as exc:  # sent, then the connection broke: UNKNOW
                return CheckOutcome(
                    job,
                    delivered=True,
                    action="unknown",
                    error=f"{type(exc).__name__}: {exc}",
                    answer="INVALID",
                )
            action, answer = _parse_answer(response)
            return CheckOutcome(
                job, delivered=True, action=action, status_code=response.status_code, answer=answer
            )

    # trust_env=False: checks go straight to the producer, never through an HTTP(S)_PROXY.
    async with httpx.AsyncClient(
        timeout=timeout_s, follow_redirects=False, trust_env=False
    ) as client:
        return list(await asyncio.gather(*(send(client, job) for job in jobs)))


def checks_send(jobs: list[CheckJob]) -> list[CheckOutcome]:
    """Step 2: POST every job in parallel (at most ``HALFMOON_CHECK_CONCURRENCY`` at once), each
    with ``HALFMOON_CHECK_REQUEST_TIMEOUT_MS``. Never call inside a database transaction."""
    if not jobs:
        return []
    return asyncio.run(_send_all(jobs))


def check_delivered_record(
    *,
    transaction_id: str,
    producer_group: str,
    channel: str,
    now: int,
    detail: dict[str, Any],
    outcome: str = "",
) -> int:
    """Count one delivered check of ``transaction_id`` in ``check_times`` and the check journal
    (``outcome``: the producer's answer, e.g. COMMIT_MESSAGE or TIMEOUT; empty for a poll
    hand-out), and mark its group reachable.

    Returns the transaction's check_times after counting. Inside the caller's atomic().
    """
    Transaction.objects.filter(pk=transaction_id).update(
        check_times=F("check_times") + 1, last_check_timestamp=now, undelivered_checks=0
    )
    tx = Transaction.objects.get(pk=transaction_id)
    TransactionEvent.objects.create(
        transaction_id=tx.pk,
        kind=TransactionEvent.Kind.CHECK_SENT,
        timestamp=now,
        check_times=tx.check_times,
        outcome=outcome,
        actor=channel,
        detail=detail,
    )
    transaction_announce(tx, "check_sent")
    ProducerGroup.objects.filter(name=producer_group).exclude(
        unreachable_since__isnull=True, last_check_error=""
    ).update(unreachable_since=None, last_check_error="")
    return tx.check_times


def _group_health_record(outcomes: list[CheckOutcome], *, now: int) -> None:
    """Back a producer group off when none of its checks this round got an answer in time
    (all timed out or undelivered): no checks to it for a delay doubling from
    ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check interval. One answer clears it.
    A dead producer thus costs one probe per backoff instead of a batch of timeouts per round,
    and cannot delay the checks of healthy groups."""
    interval = conf.transaction_check_interval_ms
    base = conf.check_undelivered_backoff_ms
    answered: dict[str, bool] = {}
    for outcome in outcomes:
        ok = outcome.delivered and not outcome.timed_out
        answered[outcome.job.producer_group] = answered.get(outcome.job.producer_group, False) or ok
    for group, ok in answered.items():
        if ok:
            ProducerGroup.objects.filter(name=group).exclude(
                check_failures=0, check_backoff_until=None
            ).update(check_failures=0, check_backoff_until=None)
            continue
        with transaction.atomic():
            row = ProducerGroup.objects.select_for_update().filter(name=group).first()
            if row is None:
                continue
            row.check_failures += 1
            row.check_backoff_until = now + min(
                interval, base * 2 ** min(row.check_failures - 1, 20)
            )
            row.save(update_fields=["check_failures", "check_backoff_until"])
        logger.warning(
            "producer group %s backed off until %d (%d failed rounds)",
            group,
            row.check_backoff_until,
            row.check_failures,
        )


def check_outcomes_apply(outcomes: list[CheckOutcome], *, now: int | None = None) -> None:
    """Step 3: record each outcome and apply its answer.

    A delivered check counts in ``check_times`` (journal outcome: the answer, TIMEOUT or
    INVALID); a COMMIT/ROLLBACK answer ends the transaction with ``resolved_by=check`` (a
    transaction resolved meanwhile is left as it is). An undelivered one is retried after a
    backoff doubling from ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check interval,
    and marks its group unreachable. Groups with no answer at all are backed off.
    """
    now = now if now is not None else now_ms()
    interval = conf.transaction_check_interval_ms
    base = conf.check_undelivered_backoff_ms
    for outcome in outcomes:
        job = outcome.job
        if outcome.delivered:
            with transaction.atomic():
                check_delivered_record(
                    transaction_id=job.transaction_id,
                    producer_group=job.producer_group,
                    channel="http",
                    now=now,
                    outcome=outcome.label,
                    detail={"status_code": outcome.status_code, "error": outcome.error},
                )
            if outcome.action in ("commit", "rollback"):
                try:
                    transaction_end(
                        transaction_id=job.transaction_id,
                        producer_group=job.producer_group,
                        action=outcome.action,  # type: ignore[arg-type]
                        from_transaction_check=True,
                    )
                except HalfmoonError as exc:
                    logger.info(
                        "check answer for %s not applied: %s", job.transaction_id, exc.message
                    )
            continue
        with transaction.atomic():
            tx = (
                Transaction.objects.select_for_update()
                .filter(pk=job.transaction_id, state=TransactionState.PREPARED)
                .first()
            )
            if tx is not None:
                backoff = min(interval, base * 2 ** min(tx.undelivered_checks, 20))
                tx.undelivered_checks += 1
                tx.next_check_timestamp = now + backoff
                tx.save(update_fields=["undelivered_checks", "next_check_timestamp"])
                TransactionEvent.objects.create(
                    transaction_id=tx.pk,
                    kind=TransactionEvent.Kind.CHECK_UNDELIVERED,
                    timestamp=now,
                    check_times=tx.check_times,
                    outcome="UNDELIVERED",
                    actor="http",
                    detail={"error": outcome.error, "retry_in_ms": backoff},
                )
                transaction_announce(tx, "check_undelivered")
            ProducerGroup.objects.filter(
                name=job.producer_group, unreachable_since__isnull=True
            ).update(unreachable_since=now)
            ProducerGroup.objects.filter(name=job.producer_group).update(
                last_check_error=outcome.error[:500]
            )
    _group_health_record(outcomes, now=now)


OP_READ_BATCH = (
    32  # Op messages read at a time when advancing the Op checkpoint (RocketMQ pulls 32)
)
OP_READ_MAX_BATCHES = 100  # per call: the checkpoint catches up over later runs


def checkpoint_advance(*, half_queue_id: int) -> tuple[int, int]:
    """Advance the scan checkpoints of one half queue and its Op queue, kept as consumer offsets
    of the internal group ``CID_RMQ_SYS_TRANS`` (RocketMQ ``check()``: ``updateConsumeOffset``
    of the half queue, ``calculateOpOffset`` of the Op queue).

    The half checkpoint moves to the first half queue offset that is not done: still PREPARED,
    or resolved but not yet named by an Op message (every offset below it is resolved and in
    the Op log, or discarded, or superseded by a resume). The Op checkpoint moves only over the
    contiguous prefix of Op messages whose half offsets all lie below the half checkpoint, read
    ``OP_READ_BATCH`` at a time. Both only move forward. Cost: two index reads plus the Op
    messages passed over, whatever the history.

    Returns (half checkpoint, Op checkpoint).
    """
    with transaction.atomic():
        ConsumerOffset.objects.bulk_create(
            [
                ConsumerOffset(
                    consumer_group=CHECK_GROUP, topic=HALF_TOPIC, queue_id=half_queue_id
                ),
                ConsumerOffset(
                    consumer_group=CHECK_GROUP, topic=OP_HALF_TOPIC, queue_id=half_queue_id
                ),
            ],
            ignore_conflicts=True,
        )
        offsets = {
            o.topic: o
            for o in ConsumerOffset.objects.select_for_update().filter(
                consumer_group=CHECK_GROUP,
                topic__in=[HALF_TOPIC, OP_HALF_TOPIC],
                queue_id=half_queue_id,
            )
        }
        half_ckpt, op_ckpt = offsets[HALF_TOPIC], offsets[OP_HALF_TOPIC]
        bounds = [
            ConsumeQueue.objects.filter(topic=HALF_TOPIC, queue_id=half_queue_id)
            .values_list("max_offset", flat=True)
            .first()
            or 0,
            Transaction.objects.filter(
                half_queue_id=half_queue_id, state=TransactionState.PREPARED
            ).aggregate(m=Min("half_queue_offset"))["m"],
            Resolution.objects.filter(
                half_queue_id=half_queue_id, op_commit_log_offset__isnull=True
            ).aggregate(m=Min("half_queue_offset"))["m"],
        ]
        new_half = max(half_ckpt.offset, min(b for b in bounds if b is not None))
        new_op = op_ckpt.offset
        for _ in range(OP_READ_MAX_BATCHES):
            batch = list(
                Message.objects.filter(
                    topic=OP_HALF_TOPIC, queue_id=half_queue_id, queue_offset__gte=new_op
                )
                .order_by("queue_offset")
                .values_list("queue_offset", "body")[:OP_READ_BATCH]
            )
            blocked = False
            for queue_offset, body in batch:
                named = [int(p) for p in bytes(body).decode("ascii").split(",") if p]
                if named and max(named) >= new_half:
                    blocked = True
                    break
                new_op = queue_offset + 1
            if blocked or len(batch) < OP_READ_BATCH:
                break
        if new_half != half_ckpt.offset:
            half_ckpt.offset = new_half
            half_ckpt.save(update_fields=["offset"])
        if new_op != op_ckpt.offset:
            op_ckpt.offset = new_op
            op_ckpt.save(update_fields=["offset"])
    return new_half, new_op


def check_round(*, half_queue_id: int, due_by: int | None = None) -> dict[str, int]:
    """One back-check round on a half queue: claim, send, apply.

    Returns counts: ``due`` (transactions handled: checked, queued or discarded), ``sent``
    (HTTP checks), ``delivered``, ``undelivered``, ``committed``, ``rolled_back``.
    """
    jobs, due = check_claim(half_queue_id=half_queue_id, due_by=due_by)
    outcomes = checks_send(jobs)
    check_outcomes_apply(outcomes)
    return {
        "due": due,
        "sent": len(jobs),
        "delivered": sum(o.delivered for o in outcomes),
        "undelivered": sum(not o.delivered for o in outcomes),
        "committed": sum(o.action == "commit" for o in outcomes),
        "rolled_back": sum(o.action == "rollback" for o in outcomes),
    }


def check_requests_poll(*, producer_group: str, max_requests: int = 32) -> list[dict[str, Any]]:
    """Hand the queued check requests of a polling group to this poller.

    Each request handed out counts as a delivered check (api-v1). Requests whose transaction
    was resolved meanwhile are dropped. Returns the check bodies (same shape as a POSTed check).
    """
    now = now_ms()
    out: list[dict[str, Any]] = []
    with transaction.atomic():
        ProducerGroup.objects.filter(name=producer_group).update(last_poll_timestamp=now)
        requests = list(
            CheckRequest.objects.select_for_update(skip_locked=True)
            .filter(producer_group=producer_group, delivered_timestamp__isnull=True)
            .order_by("created_timestamp")[:max_requests]
        )
        if not requests:
            return out
        txs = Transaction.objects.in_bulk([r.transaction_id for r in requests])
        halves = Message.objects.in_bulk([t.half_commit_log_offset for t in txs.values()])
        for request in requests:
            tx = txs[request.transaction_id]
            if tx.state != TransactionState.PREPARED:
                request.delete()
                continue
            request.delivered_timestamp = now
            request.save(update_fields=["delivered_timestamp"])
            check_times = check_delivered_record(
                transaction_id=tx.pk,
                producer_group=producer_group,
                channel="poll",
                now=now,
                detail={},
            )
            out.append(check_payload(tx, halves[tx.half_commit_log_offset], check_times))
    return out

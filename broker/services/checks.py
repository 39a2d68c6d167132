"""Back-checks: ask a producer of the group about a PREPARED transaction
(RocketMQ TransactionalMessageCheckService, TransactionalMessageServiceImpl.check,
AbstractTransactionalMessageCheckListener.resolveHalfMsg).

A check round on one half queue has three steps, and only the middle one touches the network:
1. ``check_claim``: in one database transaction, lock the due PREPARED transactions
   (``SKIP LOCKED``), discard those past ``HALFMOON_TRANSACTION_CHECK_MAX`` or
   ``HALFMOON_FILE_RESERVED_HOURS``, push the others' next check one interval ahead (so no
   other worker takes them) and queue check requests for groups that poll.
2. ``checks_send``: POST the signed checks in parallel (httpx), outside any database transaction.
3. ``check_outcomes_apply``: count delivered checks, apply COMMIT/ROLLBACK answers through
   ``transaction_end``, and retry undelivered checks with backoff without counting them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx
from django.db import transaction
from django.db.models import F

from broker.conf import setting
from broker.constants import RESERVED_PROPERTIES
from broker.errors import HalfmoonError
from broker.models import (
    CheckRequest,
    Message,
    ProducerGroup,
    Transaction,
    TransactionEvent,
    TransactionState,
    now_ms,
)
from broker.services.transactions import (
    DISCARD_CHECK_MAX,
    DISCARD_FILE_RESERVED_TIME,
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


def check_claim(*, half_queue_id: int, now: int | None = None) -> tuple[list[CheckJob], int]:
    """Step 1 of a round on ``half_queue_id``: lock due transactions, discard, lease, queue.

    Returns (the HTTP checks to send, how many due transactions were handled). At most ``HALFMOON_CHECK_BATCH_SIZE`` transactions per call.
    Discards past ``transactionCheckMax`` (RocketMQ ``needDiscard``) and past
    ``fileReservedTime`` (``needSkip``).
    """
    now = now if now is not None else now_ms()
    interval = setting("HALFMOON_TRANSACTION_CHECK_INTERVAL_MS")
    check_max = setting("HALFMOON_TRANSACTION_CHECK_MAX")
    reserved_ms = setting("HALFMOON_FILE_RESERVED_HOURS") * 3_600_000
    jobs: list[CheckJob] = []
    with transaction.atomic():
        due = list(
            Transaction.objects.select_for_update(skip_locked=True)
            .filter(
                state=TransactionState.PREPARED,
                half_queue_id=half_queue_id,
                next_check_timestamp__lte=now,
            )
            .order_by("next_check_timestamp")[: setting("HALFMOON_CHECK_BATCH_SIZE")]
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
                transaction_discard(tx, reason=DISCARD_FILE_RESERVED_TIME)
                continue
            if tx.check_times >= check_max:
                transaction_discard(tx, reason=DISCARD_CHECK_MAX)
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
    return jobs, len(due)


def _parse_answer(response: httpx.Response) -> str | None:
    """The action a check answer asks for: 202 -> None; 200 with a valid state -> that action;
    anything else -> unknown, logged with the answer (strict parsing)."""
    if response.status_code == 202:
        return None
    if response.status_code == 200:
        try:
            state = response.json().get("state")
        except (ValueError, AttributeError):
            state = None
        if isinstance(state, str) and state in CHECK_STATES:
            return CHECK_STATES[state]
    logger.warning(
        "check answer counted as UNKNOW: HTTP %s %r", response.status_code, response.text[:200]
    )
    return "unknown"


async def _send_all(jobs: list[CheckJob]) -> list[CheckOutcome]:
    timeout_s = setting("HALFMOON_CHECK_REQUEST_TIMEOUT_MS") / 1000
    limit = asyncio.Semaphore(setting("HALFMOON_CHECK_CONCURRENCY"))

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
            except httpx.HTTPError as exc:  # sent, then timed out or broke: UNKNOW for this round
                return CheckOutcome(
                    job, delivered=True, action="unknown", error=f"{type(exc).__name__}: {exc}"
                )
            return CheckOutcome(
                job,
                delivered=True,
                action=_parse_answer(response),
                status_code=response.status_code,
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
    *, transaction_id: str, producer_group: str, channel: str, now: int, detail: dict[str, Any]
) -> int:
    """Count one delivered check of ``transaction_id`` and mark its group reachable.

    Returns the transaction's check_times after counting. Inside the caller's atomic().
    """
    Transaction.objects.filter(pk=transaction_id).update(
        check_times=F("check_times") + 1, last_check_timestamp=now, undelivered_checks=0
    )
    tx = Transaction.objects.get(pk=transaction_id)
    TransactionEvent.objects.create(
        transaction=tx,
        kind=TransactionEvent.Kind.CHECK_SENT,
        timestamp=now,
        check_times=tx.check_times,
        detail={"channel": channel, **detail},
    )
    transaction_announce(tx, "check_sent")
    ProducerGroup.objects.filter(name=producer_group).exclude(
        unreachable_since__isnull=True, last_check_error=""
    ).update(unreachable_since=None, last_check_error="")
    return tx.check_times


def check_outcomes_apply(outcomes: list[CheckOutcome], *, now: int | None = None) -> None:
    """Step 3: record each outcome and apply its answer.

    A delivered check counts in ``check_times``; a COMMIT/ROLLBACK answer ends the transaction
    with ``resolved_by=check`` (a transaction resolved meanwhile is left as it is). An
    undelivered one is retried after a backoff doubling from
    ``HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS`` up to the check interval, and marks its group
    unreachable.
    """
    now = now if now is not None else now_ms()
    interval = setting("HALFMOON_TRANSACTION_CHECK_INTERVAL_MS")
    base = setting("HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS")
    for outcome in outcomes:
        job = outcome.job
        if outcome.delivered:
            with transaction.atomic():
                check_delivered_record(
                    transaction_id=job.transaction_id,
                    producer_group=job.producer_group,
                    channel="http",
                    now=now,
                    detail={
                        "status_code": outcome.status_code,
                        "answer": outcome.action,
                        "error": outcome.error,
                    },
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
                    transaction=tx,
                    kind=TransactionEvent.Kind.CHECK_UNDELIVERED,
                    timestamp=now,
                    check_times=tx.check_times,
                    detail={"channel": "http", "error": outcome.error, "retry_in_ms": backoff},
                )
                transaction_announce(tx, "check_undelivered")
            ProducerGroup.objects.filter(
                name=job.producer_group, unreachable_since__isnull=True
            ).update(unreachable_since=now)
            ProducerGroup.objects.filter(name=job.producer_group).update(
                last_check_error=outcome.error[:500]
            )


def check_round(*, half_queue_id: int) -> dict[str, int]:
    """One back-check round on a half queue: claim, send, apply.

    Returns counts: ``due`` (transactions handled: checked, queued or discarded), ``sent``
    (HTTP checks), ``delivered``, ``undelivered``, ``committed``, ``rolled_back``.
    """
    jobs, due = check_claim(half_queue_id=half_queue_id)
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

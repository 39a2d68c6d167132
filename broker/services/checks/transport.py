"""Step 2 of a check round: POST the signed checks to the producers (httpx) and read their
answers (RocketMQ ``AbstractTransactionalMessageCheckListener.sendCheckMessage``, answered by
the producer's ``checkLocalTransaction`` with a ``LocalTransactionState``)."""

from __future__ import annotations

import asyncio
import logging

import httpx
from halfmoon_client.signing import SIGNATURE_HEADER

from broker.conf import conf
from broker.plumbing.pinned_transport import CheckTargetRefused
from broker.rules.states import CheckAnswer, EndAction, action_of_answer, answer_label
from broker.services.checks.payload import CheckJob, CheckOutcome
from broker.services.checks.targets import pinned_transport

logger = logging.getLogger("halfmoon.checks")

# Raised before the request reached the producer: the check is not delivered, not counted.
NOT_SENT_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
)


def check_answer_parse(response: httpx.Response) -> tuple[EndAction | None, CheckAnswer]:
    """The action a check answer asks for and its journal label: 202 -> (None, ACCEPTED); 200
    with a JSON object whose ``state`` is a LocalTransactionState -> its action and label
    (``broker.rules.states.action_of_answer`` / ``answer_label``: UNKNOWN is labelled UNKNOW);
    anything else -> (unknown, INVALID), logged with the answer. Strict: only the three states
    of api-v1 (and UNKNOWN), exact case, nothing around them."""
    if response.status_code == 202:
        return None, CheckAnswer.ACCEPTED
    if response.status_code == 200:
        try:
            state = response.json().get("state")
        except (ValueError, AttributeError):
            state = None
        if isinstance(state, str):
            action, label = action_of_answer(state), answer_label(state)
            if action is not None and label is not None:
                return action, label
    logger.warning(
        "check answer counted as UNKNOW: HTTP %s %r", response.status_code, response.text[:200]
    )
    return "unknown", CheckAnswer.INVALID


def _unanswered(job: CheckJob, exc: Exception, answer: CheckAnswer) -> CheckOutcome:
    """A check that reached the producer but got no answer (TIMEOUT) or a broken one
    (INVALID): delivered, counted as UNKNOW."""
    return CheckOutcome(
        job,
        delivered=True,
        action="unknown",
        error=f"{type(exc).__name__}: {exc}",
        answer=answer,
        timed_out=answer == CheckAnswer.TIMEOUT,
    )


async def _check_send(
    client: httpx.AsyncClient, job: CheckJob, limit: asyncio.Semaphore
) -> CheckOutcome:
    """POST one job and turn what happened into its outcome (never raises an httpx error)."""
    async with limit:
        try:
            response = await client.post(
                job.check_url,
                content=job.body,
                headers={"Content-Type": "application/json", SIGNATURE_HEADER: job.signature},
            )
        except CheckTargetRefused as exc:  # judged before connecting: never sent
            logger.warning("check of %s to %s refused: %s", job.transaction_id, job.check_url, exc)
            return CheckOutcome(
                job,
                delivered=False,
                action=None,
                error=f"{type(exc).__name__}: {exc}",
                refused=exc.refusal.rule,
            )
        except NOT_SENT_ERRORS as exc:
            return CheckOutcome(
                job, delivered=False, action=None, error=f"{type(exc).__name__}: {exc}"
            )
        except httpx.TimeoutException as exc:  # sent, then no answer in time: UNKNOW
            return _unanswered(job, exc, CheckAnswer.TIMEOUT)
        except httpx.HTTPError as exc:  # sent, then the connection broke: UNKNOW
            return _unanswered(job, exc, CheckAnswer.INVALID)
        action, answer = check_answer_parse(response)
        return CheckOutcome(
            job,
            delivered=True,
            action=action,
            status_code=response.status_code,
            answer=answer,
            latency_ms=round(response.elapsed.total_seconds() * 1000),
        )


async def _checks_send_all(jobs: list[CheckJob]) -> list[CheckOutcome]:
    limit = asyncio.Semaphore(conf.check_concurrency)
    # trust_env=False: checks go straight to the producer, never through an HTTP(S)_PROXY.
    # The pinned transport judges each target after resolving it (broker.rules.check_targets).
    async with httpx.AsyncClient(
        timeout=conf.check_request_timeout_ms / 1000,
        follow_redirects=False,
        trust_env=False,
        transport=pinned_transport(),
    ) as client:
        return list(await asyncio.gather(*(_check_send(client, job, limit) for job in jobs)))


def checks_send(jobs: list[CheckJob]) -> list[CheckOutcome]:
    """POST every job in parallel (at most ``HALFMOON_CHECK_CONCURRENCY`` at once), each with
    ``HALFMOON_CHECK_REQUEST_TIMEOUT_MS`` to connect and to read. Returns one outcome per job,
    in order: undelivered (refused, connect timeout, or a target the check-target rule refuses
    once resolved: ``broker.services.checks.targets``), TIMEOUT (sent, no answer in time),
    INVALID (sent, connection broken or an answer that is no state), or the parsed answer.

    Never call inside a database transaction (healthchecks' rule: slow I/O after commit).
    """
    if not jobs:
        return []
    return asyncio.run(_checks_send_all(jobs))

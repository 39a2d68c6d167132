"""Step 2 of a check round for half messages sent over gRPC: the back-check written as a
``RecoverOrphanedTransactionCommand`` on the telemetry stream of a live RocketMQ client of the
producer group (RocketMQ proxy ``TransactionMessageService`` / ``ProducerManager
.getAvailableChannel``), through the gRPC server process holding that stream
(``broker.plumbing.telemetry_bus``).

Which client: the one that sent the half message (``Transaction.producer_client_id``) while it
is live, then any other live producer client of the group that publishes the same topic, most
recently heard from first. A client is live while connected and heard from within
``HALFMOON_GRPC_CLIENT_EXPIRY_MS`` (RocketMQ channelExpiredTimeout). A check written on a
stream is delivered (counted in check times, journalled ``ACCEPTED``: the client answers with
EndTransaction, ``SOURCE_SERVER_CHECK``); one that reaches no live client is undelivered and
not counted, as an unreachable webhook.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.conf import conf
from broker.models import ClientConnection
from broker.plumbing.telemetry_bus import telemetry_commands_send
from broker.rules.clock import now_ms
from broker.rules.states import CheckAnswer
from broker.selectors.clients import client_connection_live_q
from broker.services.checks.payload import CheckJob, CheckOutcome

RECOVER_ORPHANED_TRANSACTION = "recover_orphaned_transaction"
"""The telemetry command type of a back-check (``TelemetryCommand.recover_orphaned_transaction_command``)."""

MAX_CLIENTS_TRIED = 3
"""Live clients a check is offered to, one after the other, before it counts as undelivered."""


def check_clients(job: CheckJob, live: Sequence[ClientConnection]) -> list[ClientConnection]:
    """The clients ``job`` may be written to, in the order they are tried: its sender
    (``job.client_id``) if it is among ``live`` and still of the group, then the other clients of
    ``live`` of the job's producer group that publish its topic (``live`` is ordered most
    recently heard from first)."""
    of_group = [c for c in live if job.producer_group in c.producer_groups]
    sender = [c for c in of_group if c.client_id == job.client_id]
    others = [c for c in of_group if c.client_id != job.client_id and job.topic in c.topics]
    return sender + others


def _live_producer_clients(groups: set[str], *, now: int) -> list[ClientConnection]:
    """The live producer clients (most recently heard from first) having one of ``groups``."""
    clients = ClientConnection.objects.filter(
        client_connection_live_q(now=now), kind=ClientConnection.Kind.PRODUCER
    ).order_by("-last_heartbeat_timestamp", "client_id")
    return [c for c in clients if groups.intersection(c.producer_groups)]


def telemetry_checks_send(jobs: list[CheckJob], *, now: int | None = None) -> list[CheckOutcome]:
    """Write each job's back-check on a live client's telemetry stream (``check_clients``
    order, at most ``MAX_CLIENTS_TRIED`` clients, each waited for at most
    ``HALFMOON_CHECK_REQUEST_TIMEOUT_MS``). Returns one outcome per job, in order: delivered
    (``ACCEPTED``, ``client_id`` the client written to, ``latency_ms`` until the server process
    confirmed the write) or undelivered with the reason in ``error``.

    Never call inside a database transaction (the waits would hold its locks).
    """
    if not jobs:
        return []
    now = now if now is not None else now_ms()
    live = _live_producer_clients({job.producer_group for job in jobs}, now=now)
    candidates = [check_clients(job, live)[:MAX_CLIENTS_TRIED] for job in jobs]
    outcomes: list[CheckOutcome | None] = [None] * len(jobs)
    errors = [
        f"no live gRPC client of producer group {job.producer_group} publishing {job.topic}"
        for job in jobs
    ]
    for attempt in range(MAX_CLIENTS_TRIED):
        pending = [i for i, c in enumerate(candidates) if outcomes[i] is None and len(c) > attempt]
        if not pending:
            break
        commands = [
            (
                candidates[i][attempt].server,
                {
                    "type": RECOVER_ORPHANED_TRANSACTION,
                    "client_id": candidates[i][attempt].client_id,
                    "transaction_id": jobs[i].transaction_id,
                    "commit_log_offset": jobs[i].commit_log_offset,
                    "check_times": jobs[i].check_times,
                },
            )
            for i in pending
        ]
        started = now_ms()
        replies = telemetry_commands_send(commands, timeout_s=conf.check_request_timeout_ms / 1000)
        latency = now_ms() - started
        for i, reply in zip(pending, replies, strict=True):
            client = candidates[i][attempt]
            if reply == "written":
                outcomes[i] = CheckOutcome(
                    jobs[i],
                    delivered=True,
                    action=None,
                    answer=CheckAnswer.ACCEPTED,
                    latency_ms=latency,
                    client_id=client.client_id,
                )
            else:
                reason = "its stream is gone" if reply == "gone" else "its server did not answer"
                errors[i] = f"gRPC client {client.client_id}: {reason}"
    return [
        outcome
        if outcome is not None
        else CheckOutcome(job, delivered=False, action=None, error=errors[i])
        for i, (job, outcome) in enumerate(zip(jobs, outcomes, strict=True))
    ]

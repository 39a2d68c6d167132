"""The telemetry streams this gRPC server process holds, and what is written on them: the answer
to a client's settings and the back-checks (``RecoverOrphanedTransactionCommand``) that
``broker.services.checks.telemetry`` sends through ``broker.plumbing.telemetry_bus``.

Nothing here blocks on a client: each stream has an outbox that its handler drains onto the
wire, and a command is put there without waiting (a client that stops reading, as the Python
PushConsumer's read loop does after a settings answer, fills its outbox; later commands for it
are then refused, answered ``gone``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker.conf import conf
from broker.constants import PROPERTY_REAL_TOPIC
from broker.grpc.convert import OK, message_proto
from broker.models import Message
from broker.selectors.messages import message_at

logger = logging.getLogger("halfmoon.grpc")

OUTBOX_MAX = 1000
"""Commands waiting to be written on one stream; past it a command is refused."""

RECOVER_ORPHANED_TRANSACTION = "recover_orphaned_transaction"
"""The telemetry bus command type of a back-check."""

PRODUCER_SEND_ATTEMPTS = 3
"""A producer's send attempts (RocketMQ proxy's default producer retry policy)."""
PRODUCER_BACKOFF_MS = (10, 1000, 2.0)
"""A producer's retry backoff: initial and max (ms), multiplier (the proxy's defaults)."""
CONSUMER_BACKOFF_S = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
"""A consumer's redelivery delays after a failed consumption (s), attempt by attempt: RocketMQ's
``messageDelayLevel`` from 1 s (the proxy's default customized backoff)."""
CONSUMER_EXPONENTIAL_S = (1, 7200, 2.0)
"""The same as an exponential backoff: initial and max (s), multiplier."""
LONG_POLLING_TIMEOUT_S = 20
"""The long polling a consumer is told to ask for (the proxy clamps receives to 20 s)."""
RECEIVE_BATCH_SIZE = 32
"""Messages a PushConsumer asks for per receive (Halfmoon's receive maximum)."""


class TelemetryStream:
    """One client's telemetry stream held by this process: its outbox (``TelemetryCommand``s
    waiting to be written; None ends the stream)."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()

    def put(self, command: spb.TelemetryCommand) -> bool:
        """Queue ``command`` for the wire without waiting; False when ``OUTBOX_MAX`` commands
        wait already (the client does not read)."""
        if self.outbox.qsize() >= OUTBOX_MAX:
            logger.warning("telemetry outbox of client %s is full: command dropped", self.client_id)
            return False
        self.outbox.put_nowait(command)
        return True

    def end(self) -> None:
        """End the stream (its handler returns once the commands before are written)."""
        self.outbox.put_nowait(None)


InThread = Callable[..., Awaitable[Any]]


class TelemetryRegistry:
    """The live telemetry streams of this process, by client id (the newest stream of a client
    that opened several, e.g. after a reconnection). ``command_write`` is the
    ``TelemetryCommandListener``'s handler."""

    def __init__(self, in_thread: InThread) -> None:
        self.in_thread = in_thread
        self._streams: dict[str, list[TelemetryStream]] = {}

    def register(self, stream: TelemetryStream) -> None:
        """Hold ``stream`` (its client's settings arrived on it)."""
        streams = self._streams.setdefault(stream.client_id, [])
        if stream not in streams:
            streams.append(stream)

    def unregister(self, stream: TelemetryStream) -> bool:
        """Forget ``stream`` (it ended). Returns whether its client has no stream left here."""
        streams = self._streams.get(stream.client_id, [])
        if stream in streams:
            streams.remove(stream)
        if not streams:
            self._streams.pop(stream.client_id, None)
            return True
        return False

    def stream_of(self, client_id: str) -> TelemetryStream | None:
        """The newest live stream of ``client_id`` held here, or None."""
        streams = self._streams.get(client_id)
        return streams[-1] if streams else None

    def __len__(self) -> int:
        return sum(len(s) for s in self._streams.values())

    async def command_write(self, command: dict[str, Any]) -> bool:
        """Write a telemetry bus command on its client's stream: a back-check
        (``{"type": "recover_orphaned_transaction", "client_id", "transaction_id",
        "commit_log_offset", "check_times"}``) becomes a ``RecoverOrphanedTransactionCommand``
        carrying the half message as a client reads it (``recover_command``). False (answered
        ``gone``) when no live stream of the client is held here, the half message is gone,
        the outbox is full, or the type is unknown."""
        if command.get("type") != RECOVER_ORPHANED_TRANSACTION:
            logger.warning("telemetry command of unknown type %r ignored", command.get("type"))
            return False
        stream = self.stream_of(str(command.get("client_id", "")))
        if stream is None:
            return False
        half = await self.in_thread(message_at, int(command["commit_log_offset"]))
        if half is None:
            return False
        return stream.put(recover_command(half, str(command["transaction_id"])))


def recover_command(half: Message, transaction_id: str) -> spb.TelemetryCommand:
    """The back-check of half message ``half``: its message as a client reads it, with the
    real topic (REAL_TOPIC) and its msg_id as message id, and ``transaction_id`` (RocketMQ
    proxy ``TransactionMessageService``: the client's checker gets it and answers with
    EndTransaction ``SOURCE_SERVER_CHECK``)."""
    message = message_proto(half, topic=half.properties.get(PROPERTY_REAL_TOPIC) or half.topic)
    return spb.TelemetryCommand(
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=transaction_id
        )
    )


def _backoff(settings: pb.Settings, *, max_attempts: int, consumer: bool) -> pb.RetryPolicy:
    """The retry policy in a settings answer. Its strategy is a oneof: the Python client's
    PushConsumer reads only ``customized_backoff``, the Node.js client only
    ``exponential_backoff`` (its producer throws on any other), Java and Go either: a Python
    consumer gets the customized one, everyone else the exponential one."""
    policy = pb.RetryPolicy(max_attempts=max_attempts)
    python = settings.user_agent.language == pb.Language.PYTHON
    if consumer and python:
        for seconds in CONSUMER_BACKOFF_S:
            policy.customized_backoff.next.add(seconds=seconds)
        return policy
    if consumer:
        initial_s, max_s, multiplier = CONSUMER_EXPONENTIAL_S
        policy.exponential_backoff.initial.FromSeconds(initial_s)
        policy.exponential_backoff.max.FromSeconds(max_s)
    else:
        initial_ms, max_ms, multiplier = PRODUCER_BACKOFF_MS
        policy.exponential_backoff.initial.FromMilliseconds(initial_ms)
        policy.exponential_backoff.max.FromMilliseconds(max_ms)
    policy.exponential_backoff.multiplier = multiplier
    return policy


def settings_answer(
    settings: pb.Settings, *, max_delivery_attempts: int | None = None, fifo: bool = False
) -> spb.TelemetryCommand:
    """The answer to a client's ``settings``: status OK and its settings completed by the
    broker's (RocketMQ proxy ``ClientActivity.processAndWriteClientSettings``).

    A producer gets ``publishing`` (its topics, ``max_body_size`` =
    ``HALFMOON_MAX_MESSAGE_SIZE`` bytes, ``validate_message_type``) and a retry policy of
    ``PRODUCER_SEND_ATTEMPTS``; a consumer ``subscription`` (its group and subscriptions,
    ``fifo``: its consumer group's, so a PushConsumer consumes each message group in order,
    ``receive_batch_size``, ``long_polling_timeout``) and a retry policy of
    ``max_delivery_attempts`` (its consumer group's) attempts (``_backoff``).
    """
    answer = pb.Settings()
    answer.CopyFrom(settings)
    answer.ClearField("backoff_policy")
    if settings.client_type == pb.ClientType.PRODUCER:
        answer.publishing.max_body_size = conf.max_message_size
        answer.publishing.validate_message_type = True
        answer.backoff_policy.CopyFrom(
            _backoff(settings, max_attempts=PRODUCER_SEND_ATTEMPTS, consumer=False)
        )
    else:
        answer.subscription.fifo = fifo
        answer.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        answer.subscription.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
        attempts = max_delivery_attempts or conf.max_delivery_attempts
        answer.backoff_policy.CopyFrom(_backoff(settings, max_attempts=attempts, consumer=True))
    return spb.TelemetryCommand(status=OK, settings=answer)

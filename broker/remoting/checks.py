"""Back-checks written on a RocketMQ 4.x producer's connection: the check service's telemetry
transport (``broker.services.checks.telemetry``) publishes each check to the process holding a
live client of the group; here it becomes CHECK_TRANSACTION_STATE (39) with the half message as
one binary MessageExt (Java ``Broker2Client.checkProducerTransactionState``). The client answers
with END_TRANSACTION, ``fromTransactionCheck`` 1."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.constants import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY
from broker.models import Message
from broker.remoting import codes
from broker.remoting.connection import Connection
from broker.remoting.producers import Advertised
from broker.rules.remoting_frames import RemotingCommand
from broker.rules.remoting_messages import (
    SYSFLAG_TRANSACTION_PREPARED,
    MessageExt,
    message_ext_encode,
    offset_msg_id,
)
from broker.selectors.messages import message_at
from broker.services.checks.telemetry import RECOVER_ORPHANED_TRANSACTION

logger = logging.getLogger("halfmoon.remoting")


def check_request(
    half: Message, *, transaction_id: str, advertised: Advertised, opaque: int
) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE for half message ``half``: ext ``tranStateTableOffset`` (its
    half queue offset), ``commitLogOffset``, ``msgId`` (its UNIQ_KEY), ``transactionId``,
    ``offsetMsgId``; body its MessageExt with the real topic and queue restored (Java
    ``AbstractTransactionalMessageCheckListener``), TRAN_MSG and PGROUP kept. Flag 0, as
    the cpp client was seen to accept."""
    properties = {k: str(v) for k, v in half.properties.items()}
    topic = properties.get(PROPERTY_REAL_TOPIC) or half.topic
    queue_id = int(properties.get(PROPERTY_REAL_QUEUE_ID) or half.queue_id)
    if half.tags:
        properties["TAGS"] = half.tags
    if half.keys:
        properties["KEYS"] = half.keys
    properties.setdefault(PROPERTY_UNIQ_KEY, half.msg_id)
    properties["TRAN_MSG"] = "true"
    store = (advertised.host, advertised.port)
    body = message_ext_encode(
        MessageExt(
            topic=topic,
            body=bytes(half.body),
            properties=properties,
            queue_id=queue_id,
            queue_offset=half.queue_offset,
            commit_log_offset=half.commit_log_offset,
            sys_flag=SYSFLAG_TRANSACTION_PREPARED,
            born_timestamp=half.born_timestamp,
            born_host=store,
            store_timestamp=half.store_timestamp,
            store_host=store,
        )
    )
    return RemotingCommand(
        code=codes.CHECK_TRANSACTION_STATE,
        opaque=opaque,
        flag=0,
        language="JAVA",
        version=401,
        ext_fields={
            "tranStateTableOffset": str(half.queue_offset),
            "commitLogOffset": str(half.commit_log_offset),
            "msgId": half.msg_id,
            "transactionId": transaction_id,
            "offsetMsgId": offset_msg_id(advertised.host, advertised.port, half.commit_log_offset),
        },
        body=body,
    )


class CheckWriter:
    """The ``TelemetryCommandListener`` handler of a remoting process: ``connections(client_id)``
    gives this process's live connections of a client, newest last."""

    def __init__(
        self,
        *,
        connections: Callable[[str], list[Connection]],
        workers: Any,
        advertised: Advertised,
    ) -> None:
        self.connections = connections
        self.workers = workers
        self.advertised = advertised

    async def command_write(self, command: dict[str, Any]) -> bool:
        """Write a back-check (``{"type": "recover_orphaned_transaction", "client_id",
        "transaction_id", "commit_log_offset", "check_times"}``) on the client's newest
        connection held here. False (answered ``gone``: the check service tries the next
        client, else counts it undelivered) when no connection of the client is held here,
        the half message is gone, the write fails, or the type is unknown."""
        if command.get("type") != RECOVER_ORPHANED_TRANSACTION:
            logger.warning("check command of unknown type %r ignored", command.get("type"))
            return False
        held = self.connections(str(command.get("client_id", "")))
        if not held:
            return False
        half = await self.workers.run(message_at, int(command["commit_log_offset"]))
        if half is None:
            return False
        conn = held[-1]
        request = check_request(
            half,
            transaction_id=str(command["transaction_id"]),
            advertised=self.advertised,
            opaque=conn.next_opaque(),
        )
        try:
            await conn.write(request)
        except (ConnectionError, RuntimeError) as exc:
            logger.warning("check of %s to %s not written: %s", half.msg_id, conn.peer, exc)
            return False
        return True

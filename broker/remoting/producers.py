"""The producer side of RocketMQ 4.x remoting: GET_ROUTEINFO_BY_TOPIC, HEART_BEAT,
UNREGISTER_CLIENT, SEND_MESSAGE / SEND_MESSAGE_V2 (normal, delay-level and half messages) and
END_TRANSACTION (Java ``ClientManageProcessor``, ``SendMessageProcessor``,
``EndTransactionProcessor``, the NameServer's ``RouteInfoManager``), each a thin call of the
services HTTP and gRPC call."""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

from broker.constants import BROKER_NAME, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_UNIQ_KEY
from broker.errors import Forbidden, HalfmoonError, InvalidInput, NotFound, TooLarge
from broker.lookups import topic_by_name
from broker.models import Message, Transaction
from broker.remoting import codes
from broker.remoting.connection import Connection
from broker.rules.remoting_frames import RemotingCommand, response_of
from broker.rules.remoting_messages import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    end_action,
    from_transaction_check,
    offset_msg_id,
    properties_decode,
    v2_header_expand,
)
from broker.rules.topics import is_system_topic
from broker.selectors.transactions import transaction_get
from broker.services.access.callers import ANONYMOUS
from broker.services.commitlog.messages import message_send
from broker.services.timers.schedule import message_send_timed
from broker.services.topology import clients
from broker.services.transactions.end import transaction_end
from broker.services.transactions.half import transaction_prepare

logger = logging.getLogger("halfmoon.remoting")

CLUSTER_NAME = "HalfmoonCluster"
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
"""The group Java clients add to every heartbeat for their internal producer (send-back)."""

DROPPED_PROPERTIES = ("WAIT", "TRAN_MSG", "PGROUP", "KEYS", "TAGS", PROPERTY_UNIQ_KEY)
"""Client-set system properties the services take as arguments or set themselves."""


@dataclass(frozen=True)
class Advertised:
    """The broker endpoint routes name (``HALFMOON_REMOTING_ADVERTISED_ADDRESS``)."""

    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def error_code(exc: Exception) -> int:
    """The response code of a service error (Java ``ResponseCode``)."""
    if isinstance(exc, NotFound):
        return codes.TOPIC_NOT_EXIST if "topic" in exc.code else codes.SYSTEM_ERROR
    if isinstance(exc, Forbidden):
        return codes.NO_PERMISSION
    if isinstance(exc, InvalidInput | TooLarge):
        return codes.MESSAGE_ILLEGAL
    return codes.SYSTEM_ERROR


def route_body(*, queue_nums: int, advertised: Advertised) -> bytes:
    """GET_ROUTEINFO_BY_TOPIC's answer (Java ``TopicRouteData``): one master broker
    (brokerId "0") holding ``queue_nums`` read and write queues, perm 6 (read|write)."""
    route = {
        "orderTopicConf": None,
        "queueDatas": [
            {
                "brokerName": BROKER_NAME,
                "readQueueNums": queue_nums,
                "writeQueueNums": queue_nums,
                "perm": 6,
                "topicSynFlag": 0,
            }
        ],
        "brokerDatas": [
            {
                "cluster": CLUSTER_NAME,
                "brokerName": BROKER_NAME,
                "brokerAddrs": {"0": advertised.address},
            }
        ],
        "filterServerTable": {},
    }
    return json.dumps(route, separators=(",", ":")).encode()


class ProducerHandlers:
    """The handlers of one remoting process: ``workers.run`` runs a service call in a thread."""

    def __init__(self, *, workers: Any, advertised: Advertised, server_id: str) -> None:
        self.workers = workers
        self.advertised = advertised
        self.server_id = server_id

    async def route(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC (105): the route of a user topic; an unknown or system one
        is TOPIC_NOT_EXIST (17), as RocketMQ's NameServer answers (no auto-creation)."""
        name = request.ext_fields.get("topic", "")
        topic = None if is_system_topic(name) else await self.workers.run(topic_by_name, name)
        if topic is None or topic.system:
            return response_of(
                request,
                codes.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {name}",
            )
        body = route_body(queue_nums=topic.queue_nums, advertised=self.advertised)
        return response_of(request, codes.SUCCESS, body=body)

    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT (34): a producer's ``{"clientID", "producerDataSet": [{"groupName"}]}``
        (JSON, lenient: jsoncpp ends it with a newline) records its client as a live producer
        held by this process (``client_settings_record`` when its groups or topics changed,
        else ``client_heartbeat``), so its half messages' back-checks find this connection."""
        try:
            data = json.loads(request.body.decode("utf-8").strip() or "{}")
            client_id = str(data.get("clientID") or "")
            groups = {
                str(p.get("groupName") or "")
                for p in data.get("producerDataSet") or []
                if isinstance(p, dict)
            } - {"", INNER_PRODUCER_GROUP}
        except (ValueError, AttributeError, TypeError) as exc:
            return response_of(request, codes.SYSTEM_ERROR, remark=f"Unreadable heartbeat: {exc}")
        if not client_id:
            return response_of(request, codes.SYSTEM_ERROR, remark="The heartbeat has no clientID.")
        conn.client_id = client_id
        conn.producer_groups |= groups
        if conn.producer_groups or conn.published:
            await self.workers.run(self._producer_record, conn, request)
        return response_of(request, codes.SUCCESS)

    def _producer_record(self, conn: Connection, request: RemotingCommand) -> None:
        groups = frozenset(conn.producer_groups | {g for g, _ in conn.published})
        topics = frozenset(t for _, t in conn.published)
        if conn.recorded == (groups, topics):
            clients.client_heartbeat(client_id=conn.client_id, kind="PRODUCER")
            return
        clients.client_settings_record(
            client_id=conn.client_id,
            kind="PRODUCER",
            language=request.language,
            version=str(request.version),
            host=conn.peer,
            producer_groups=sorted(groups),
            topics=sorted(topics),
            server=self.server_id,
        )
        conn.recorded = (groups, topics)

    async def unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_CLIENT (35): the client shuts down; its row is disconnected
        (``client_disconnect``): no back-check goes to it any more."""
        client_id = request.ext_fields.get("clientID", "") or conn.client_id
        if client_id:
            await self.workers.run(
                clients.client_disconnect, client_id=client_id, server=self.server_id
            )
        return response_of(request, codes.SUCCESS)

    async def send(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """SEND_MESSAGE (10) and SEND_MESSAGE_V2 (310): store the message with the client's
        UNIQ_KEY as its msg_id (a resend stores nothing new); a half message (sysFlag
        TRANSACTION_PREPARED or TRAN_MSG=true) through ``transaction_prepare`` as the header's
        producer group, a ``DELAY`` level through ``message_send_timed``, else
        ``message_send``. A zlib body (sysFlag bit0) is stored inflated. Answers ext ``msgId``
        (the offsetMsgId of the stored message), ``queueId``, ``queueOffset``."""
        ext = (
            v2_header_expand(request.ext_fields)
            if request.code == codes.SEND_MESSAGE_V2
            else request.ext_fields
        )
        try:
            stored = await self.workers.run(self._send, conn, ext, request.body)
        except HalfmoonError as exc:
            return response_of(request, error_code(exc), remark=str(exc))
        if isinstance(stored, Transaction):
            offset, queue_id, queue_offset = (
                stored.half_commit_log_offset,
                stored.half_queue_id,
                stored.half_queue_offset,
            )
        else:
            offset, queue_id, queue_offset = stored
        fields = {
            "msgId": offset_msg_id(self.advertised.host, self.advertised.port, offset),
            "queueId": queue_id,
            "queueOffset": queue_offset,
        }
        if isinstance(stored, Transaction):
            fields["transactionId"] = stored.transaction_id
        return response_of(request, codes.SUCCESS, ext_fields=fields)

    def _send(
        self, conn: Connection, ext: dict[str, str], body: bytes
    ) -> Transaction | tuple[int, int, int]:
        topic = ext.get("topic", "")
        group = ext.get("producerGroup", "")
        sys_flag = int(ext.get("sysFlag") or 0)
        properties = properties_decode(ext.get("properties", ""))
        if sys_flag & SYSFLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise InvalidInput(f"The body is not zlib: {exc}", code="invalid_body") from None
        try:
            body.decode("utf-8")
            is_text = True
        except UnicodeDecodeError:
            is_text = False
        half = (
            sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED
            or properties.get("TRAN_MSG", "").lower() == "true"
        )
        delay = properties.pop(PROPERTY_DELAY_TIME_LEVEL, "")
        send = {
            "topic": topic,
            "body": body,
            "body_is_text": is_text,
            "tags": properties.get("TAGS", ""),
            "keys": properties.get("KEYS", ""),
            "msg_id": properties.get(PROPERTY_UNIQ_KEY) or None,
            "properties": {k: v for k, v in properties.items() if k not in DROPPED_PROPERTIES},
        }
        if half:
            group = clients.remoting_producer_group_resolve(
                caller=ANONYMOUS, producer_group=group, topic=topic
            )
            if conn.client_id and (group, topic) not in conn.published:
                clients.client_publishing_add(
                    client_id=conn.client_id, producer_group=group, topic=topic
                )
            conn.published.add((group, topic))
            tx, _ = transaction_prepare(
                producer_group=group, producer_client_id=conn.sender_id, **send
            )
            return tx
        sender = clients.remoting_sender_group(caller=ANONYMOUS, producer_group=group)
        level = int(delay) if delay.strip().isdigit() else 0
        if level > 0:
            stored = message_send_timed(delay_level=min(level, 18), producer_group=sender, **send)
        else:
            stored = message_send(producer_group=sender, **send)
        if isinstance(stored, Message):
            return stored.commit_log_offset, stored.queue_id, stored.queue_offset
        return stored.commit_log_offset, 0, 0

    async def end_transaction(self, conn: Connection, request: RemotingCommand) -> None:
        """END_TRANSACTION (37), never answered (the cpp client sends it with flag 0 and waits
        for nothing): ``commitOrRollback`` 8 commit, 12 rollback, 0 unknown through
        ``transaction_end`` as the header's producer group (else, for a check's answer
        without one, the transaction's group when this connection's client heartbeats as it);
        ``fromTransactionCheck`` "1"/"true" answers a back-check. Refusals are logged."""
        ext = request.ext_fields
        transaction_id = ext.get("msgId") or ext.get("transactionId") or ""
        action = end_action(ext.get("commitOrRollback", ""))
        if not transaction_id or action is None:
            logger.warning("END_TRANSACTION from %s ignored: %r", conn.peer, ext)
            return
        try:
            await self.workers.run(
                self._end,
                conn,
                transaction_id,
                action,
                ext.get("producerGroup", ""),
                from_transaction_check(ext.get("fromTransactionCheck", "")),
            )
        except HalfmoonError as exc:
            logger.warning("END_TRANSACTION %s of %s refused: %s", action, transaction_id, exc)

    def _end(
        self, conn: Connection, transaction_id: str, action: str, group: str, checked: bool
    ) -> None:
        if not group:
            group = transaction_get(transaction_id).producer_group
            if group not in conn.producer_groups | {g for g, _ in conn.published}:
                raise Forbidden(f"This connection does not act for producer group {group}.")
        if not ANONYMOUS.may_produce(group):
            raise Forbidden(f"This caller may not act for producer group {group}.")
        who = conn.client_id or conn.peer
        transaction_end(
            transaction_id=transaction_id,
            producer_group=group,
            action=action,  # type: ignore[arg-type]
            from_transaction_check=checked,
            remark=f"remoting client {who}",
        )

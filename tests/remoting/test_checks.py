"""Back-checks over a RocketMQ 4.x producer's connection: the check service's telemetry
transport (``telemetry_checks_send``) reaches the remoting process holding the producer's
connection, which writes CHECK_TRANSACTION_STATE with the half message as a binary
MessageExt; the client's END_TRANSACTION (fromTransactionCheck 1) resolves it."""

from __future__ import annotations

import struct
import time

import pytest

from broker.models import ClientConnection, Transaction
from broker.remoting import codes
from broker.rules.remoting_messages import (
    MESSAGE_MAGIC_CODE,
    offset_msg_id_parse,
    properties_decode,
)
from broker.services.checks.payload import CheckJob
from broker.services.checks.telemetry import telemetry_checks_send
from broker.services.topology.writes import topic_create
from tests.remoting.conftest import FrameClient, RunningServer
from tests.remoting.test_producers import UNIQ, send_ext

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_ID = "23439-127.0.0.1@DEFAULT"
HEARTBEAT = (
    b'{"clientID":"' + CLIENT_ID.encode() + b'","producerDataSet":[{"groupName":"PID_PROBE"}]}\n'
)


def _job(tx: Transaction, client_id: str) -> CheckJob:
    return CheckJob(
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        check_times=1,
        channel="telemetry",
        client_id=client_id,
        topic=tx.topic,
        commit_log_offset=tx.half_commit_log_offset,
    )


def _decode_message_ext(body: bytes) -> dict:
    total, magic = struct.unpack_from(">iI", body, 0)
    queue_id, flag, queue_offset, physical, sys_flag = struct.unpack_from(">iiqqi", body, 12)
    (body_length,) = struct.unpack_from(">i", body, 84)
    at = 88 + body_length
    topic_length = body[at]
    topic = body[at + 1 : at + 1 + topic_length].decode()
    at += 1 + topic_length
    (props_length,) = struct.unpack_from(">H", body, at)
    props = properties_decode(body[at + 2 : at + 2 + props_length].decode())
    assert at + 2 + props_length == total == len(body)
    return {"magic": magic, "queue_id": queue_id, "queue_offset": queue_offset,
            "physical": physical, "sys_flag": sys_flag, "body": body[88 : 88 + body_length],
            "topic": topic, "properties": props}  # fmt: skip


@pytest.mark.parametrize("sender_known", [True, False])
def test_a_check_reaches_the_producers_connection_and_its_answer_resolves(
    client: FrameClient, remoting_server: RunningServer, sender_known: bool
):
    topic_create(name="TopicProbe", queue_nums=4)
    if sender_known:  # heartbeat first: the half message names the client
        assert client.request(codes.HEART_BEAT, {}, HEARTBEAT).code == 0
    ext = send_ext("TopicProbe", sys_flag=4, TRAN_MSG="true", PGROUP="PID_PROBE", userProp="v")
    assert client.request(codes.SEND_MESSAGE, ext, b"tx-body").code == 0
    if not sender_known:  # the cpp client's order: its first heartbeat follows its first send
        assert client.request(codes.HEART_BEAT, {}, HEARTBEAT).code == 0
    tx = Transaction.objects.get(pk=UNIQ)
    assert (tx.producer_client_id == CLIENT_ID) is sender_known

    (outcome,) = telemetry_checks_send([_job(tx, tx.producer_client_id)])
    assert outcome.delivered, outcome.error
    assert outcome.client_id == CLIENT_ID

    check = client.read()
    assert (check.code, check.flag) == (codes.CHECK_TRANSACTION_STATE, 0)
    assert check.ext_fields["msgId"] == UNIQ
    assert check.ext_fields["transactionId"] == UNIQ
    assert check.ext_fields["commitLogOffset"] == str(tx.half_commit_log_offset)
    assert check.ext_fields["tranStateTableOffset"] == str(tx.half_queue_offset)
    _, port, offset = offset_msg_id_parse(check.ext_fields["offsetMsgId"])
    assert (port, offset) == (remoting_server.broker_port, tx.half_commit_log_offset)
    message = _decode_message_ext(check.body)
    assert message["magic"] == MESSAGE_MAGIC_CODE
    assert (message["topic"], message["queue_id"], message["body"]) == (
        "TopicProbe",
        tx.queue_id,
        b"tx-body",
    )
    assert (message["physical"], message["queue_offset"]) == (
        tx.half_commit_log_offset,
        tx.half_queue_offset,
    )
    assert message["sys_flag"] == 4
    props = message["properties"]
    assert (props["TRAN_MSG"], props["PGROUP"], props["UNIQ_KEY"]) == ("true", "PID_PROBE", UNIQ)
    assert (props["TAGS"], props["KEYS"], props["userProp"]) == ("TagA", "key-0", "v")

    answer = {
        k: check.ext_fields[k]
        for k in ("commitLogOffset", "msgId", "transactionId", "tranStateTableOffset")
    }
    client.send(
        codes.END_TRANSACTION, {**answer, "commitOrRollback": "8", "fromTransactionCheck": "1"}
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and tx.state == "PREPARED":
        time.sleep(0.05)
        tx.refresh_from_db()
    assert (tx.state, tx.resolved_by) == ("COMMITTED", "check")


def test_a_check_for_a_client_without_connection_here_is_undelivered(
    client: FrameClient, remoting_server: RunningServer
):
    topic_create(name="TopicProbe", queue_nums=4)
    assert client.request(codes.HEART_BEAT, {}, HEARTBEAT).code == 0
    ext = send_ext("TopicProbe", sys_flag=4, TRAN_MSG="true")
    assert client.request(codes.SEND_MESSAGE, ext, b"b").code == 0
    tx = Transaction.objects.get(pk=UNIQ)
    client.close()  # the connection closes: the client is disconnected
    deadline = time.monotonic() + 10
    row = ClientConnection.objects.get(pk=CLIENT_ID)
    while time.monotonic() < deadline and row.disconnected_timestamp is None:
        time.sleep(0.05)
        row.refresh_from_db()
    assert not remoting_server.server.connections_of(CLIENT_ID)
    (outcome,) = telemetry_checks_send([_job(tx, CLIENT_ID)])
    assert not outcome.delivered
    assert "no live" in outcome.error

"""broker.remoting's producer side over a real connection, on PostgreSQL and Redis: routes,
heartbeats, SEND_MESSAGE and SEND_MESSAGE_V2 (normal, delay-level, half, compressed, resent),
END_TRANSACTION (never answered), errors and the anonymous switch."""

from __future__ import annotations

import json
import time
import zlib

import pytest

from broker.models import ClientConnection, Message, ScheduledMessage, Transaction
from broker.remoting import codes
from broker.rules.remoting_messages import offset_msg_id_parse, properties_encode
from broker.services.topology.writes import topic_create
from tests.remoting.conftest import FrameClient, RunningServer

pytestmark = pytest.mark.django_db(transaction=True)

UNIQ = "0100007F00009AD00000410BD5090100"


@pytest.fixture
def topic() -> str:
    topic_create(name="TopicProbe", queue_nums=4)
    return "TopicProbe"


def send_ext(topic: str, *, uniq: str = UNIQ, sys_flag: int = 0, **props: str) -> dict:
    """A SEND_MESSAGE header as the cpp client writes it (mixed JSON types)."""
    properties = {"KEYS": "key-0", "TAGS": "TagA", "UNIQ_KEY": uniq, "WAIT": "true", **props}
    return {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "x",
        "batch": "0",
        "bornTimestamp": "1796158156993",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "flag": 0,
        "producerGroup": "PID_PROBE",
        "properties": properties_encode(properties),
        "queueId": 0,
        "reconsumeTimes": "0",
        "sysFlag": sys_flag,
        "topic": topic,
        "unitMode": "0",
    }


def test_route_names_the_broker_endpoint(
    client: FrameClient, topic, remoting_server: RunningServer
):
    response = client.request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert response.code == codes.SUCCESS
    route = json.loads(response.body)
    assert route["queueDatas"] == [
        {
            "brokerName": "halfmoon",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicSynFlag": 0,
        }
    ]
    assert route["brokerDatas"][0]["brokerAddrs"] == {
        "0": f"127.0.0.1:{remoting_server.broker_port}"
    }


def test_the_name_server_port_answers_routes(remoting_server: RunningServer, topic):
    namesrv = FrameClient(remoting_server.namesrv_port)
    try:
        assert namesrv.request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == 0
    finally:
        namesrv.close()


@pytest.mark.parametrize("name", ["TBW102", "RMQ_SYS_TRANS_HALF_TOPIC", "%RETRY%g"])
def test_route_of_an_unknown_or_system_topic_is_topic_not_exist(client: FrameClient, name):
    response = client.request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": name})
    assert response.code == codes.TOPIC_NOT_EXIST
    assert name in response.remark


def test_send_keeps_the_clients_uniq_key_and_answers_the_offset_msg_id(
    client: FrameClient, topic, remoting_server: RunningServer
):
    response = client.request(codes.SEND_MESSAGE, send_ext(topic, userProp="v0"), b"hello-0-TagA")
    assert response.code == codes.SUCCESS, response.remark
    stored = Message.objects.get(topic=topic)
    assert stored.msg_id == UNIQ
    assert (stored.tags, stored.keys, bytes(stored.body)) == ("TagA", "key-0", b"hello-0-TagA")
    assert stored.properties["userProp"] == "v0"
    assert "WAIT" not in stored.properties
    assert stored.producer_group == ""  # PID_PROBE does not exist: no sender group
    host, port, offset = offset_msg_id_parse(response.ext_fields["msgId"])
    assert (host, port, offset) == (
        "127.0.0.1",
        remoting_server.broker_port,
        stored.commit_log_offset,
    )
    assert response.ext_fields["queueId"] == str(stored.queue_id)
    assert response.ext_fields["queueOffset"] == str(stored.queue_offset)
    again = client.request(codes.SEND_MESSAGE, send_ext(topic, userProp="v0"), b"hello-0-TagA")
    assert again.ext_fields == response.ext_fields
    assert Message.objects.filter(topic=topic).count() == 1


def test_send_v2_short_names_and_a_compressed_body(client: FrameClient, topic):
    long = send_ext(topic, uniq="AB" * 16)
    names = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
             "queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i",
             "reconsumeTimes": "j", "unitMode": "k", "batch": "l"}  # fmt: skip
    short = {names.get(k, k): v for k, v in long.items()}
    short["f"] = 1  # compressed
    body = b"x" * 5000
    response = client.request(codes.SEND_MESSAGE_V2, short, zlib.compress(body))
    assert response.code == codes.SUCCESS, response.remark
    stored = Message.objects.get(msg_id="AB" * 16)
    assert bytes(stored.body) == body and stored.topic == topic


def test_a_broken_compressed_body_is_message_illegal(client: FrameClient, topic):
    response = client.request(codes.SEND_MESSAGE, send_ext(topic, sys_flag=1), b"not zlib")
    assert response.code == codes.MESSAGE_ILLEGAL
    assert not Message.objects.filter(topic=topic).exists()


def test_delay_level_zero_is_a_normal_send(client: FrameClient, topic):
    assert client.request(codes.SEND_MESSAGE, send_ext(topic, DELAY="0"), b"now").code == 0
    assert Message.objects.get(topic=topic).msg_id == UNIQ
    assert not ScheduledMessage.objects.exists()


def test_send_to_an_unknown_topic_is_topic_not_exist(client: FrameClient):
    response = client.request(codes.SEND_MESSAGE, send_ext("Nowhere"), b"b")
    assert response.code == codes.TOPIC_NOT_EXIST


@pytest.mark.parametrize(("level", "delay_ms"), [("3", 10_000), ("25", 7_200_000)])
def test_a_delay_level_waits_on_the_timer(client: FrameClient, topic, level, delay_ms):
    before = int(time.time() * 1000)
    response = client.request(codes.SEND_MESSAGE, send_ext(topic, DELAY=level), b"later")
    after = int(time.time() * 1000)
    assert response.code == codes.SUCCESS, response.remark
    waiting = ScheduledMessage.objects.get(msg_id=UNIQ)
    assert waiting.topic == topic
    assert before + delay_ms <= waiting.delivery_timestamp <= after + delay_ms  # above 18: 18
    assert not Message.objects.filter(topic=topic).exists()
    _, _, offset = offset_msg_id_parse(response.ext_fields["msgId"])
    assert offset == waiting.commit_log_offset


def test_a_half_message_is_a_transaction_of_the_headers_group(client: FrameClient, topic):
    ext = send_ext(topic, sys_flag=4, TRAN_MSG="true", PGROUP="PID_PROBE")
    response = client.request(codes.SEND_MESSAGE, ext, b"tx-body")
    assert response.code == codes.SUCCESS, response.remark
    tx = Transaction.objects.get(pk=UNIQ)
    assert (tx.producer_group, tx.topic, tx.state) == ("PID_PROBE", topic, "PREPARED")
    assert tx.producer_client_id.startswith("remoting@127.0.0.1:")
    assert response.ext_fields["transactionId"] == UNIQ
    _, _, offset = offset_msg_id_parse(response.ext_fields["msgId"])
    assert offset == tx.half_commit_log_offset
    assert response.ext_fields["queueOffset"] == str(tx.half_queue_offset)
    assert not Message.objects.filter(topic=topic).exists()
    again = client.request(codes.SEND_MESSAGE, ext, b"tx-body")
    assert again.ext_fields == response.ext_fields
    assert Transaction.objects.count() == 1


def end_ext(action: int, *, check: str = "0", group: str | None = "PID_PROBE") -> dict:
    ext = {"commitLogOffset": "1", "commitOrRollback": str(action), "fromTransactionCheck": check,
           "msgId": UNIQ, "tranStateTableOffset": "0", "transactionId": ""}  # fmt: skip
    if group is not None:
        ext["producerGroup"] = group
    return ext


@pytest.mark.parametrize(
    ("action", "check", "state", "by"),
    [(8, "0", "COMMITTED", "producer"), (12, "false", "ROLLED_BACK", "producer"),
     (8, "1", "COMMITTED", "check"), (12, "true", "ROLLED_BACK", "check")],
)  # fmt: skip
def test_end_transaction_is_never_answered(client: FrameClient, topic, action, check, state, by):
    client.request(codes.SEND_MESSAGE, send_ext(topic, sys_flag=4, TRAN_MSG="true"), b"b")
    client.send(codes.END_TRANSACTION, end_ext(action, check=check))
    # The next frame read answers the route asked after it: END_TRANSACTION got none.
    assert client.request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == 0
    tx = _settled(UNIQ)
    assert (tx.state, tx.resolved_by) == (state, by)
    assert Message.objects.filter(topic=topic).count() == (1 if state == "COMMITTED" else 0)


def _settled(transaction_id: str) -> Transaction:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tx = Transaction.objects.get(pk=transaction_id)
        if tx.state != "PREPARED":
            return tx
        time.sleep(0.05)
    raise AssertionError("the transaction was not ended")


def test_unknown_and_another_groups_end_change_nothing(
    client: FrameClient, topic, caplog, remoting_server: RunningServer
):
    client.request(codes.SEND_MESSAGE, send_ext(topic, sys_flag=4, TRAN_MSG="true"), b"b")
    client.send(codes.END_TRANSACTION, end_ext(0))
    client.send(codes.END_TRANSACTION, end_ext(8, group="PID_OTHER"))
    stranger = FrameClient(remoting_server.broker_port)  # never sent or heartbeat as PID_PROBE
    try:
        stranger.send(codes.END_TRANSACTION, end_ext(8, group=None))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(_refusals(caplog)) < 2:
            time.sleep(0.05)
    finally:
        stranger.close()
    assert len(_refusals(caplog)) == 2, caplog.text
    assert Transaction.objects.get(pk=UNIQ).state == "PREPARED"


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]


def test_heartbeat_records_a_live_producer_and_unregister_ends_it(
    client: FrameClient, topic, remoting_server: RunningServer
):
    client.request(codes.SEND_MESSAGE, send_ext(topic, sys_flag=4, TRAN_MSG="true"), b"b")
    body = b'{"clientID":"23439-127.0.0.1@DEFAULT","producerDataSet":[{"groupName":"PID_PROBE"},{"groupName":"CLIENT_INNER_PRODUCER"}]}\n'
    assert client.request(codes.HEART_BEAT, {}, body).code == codes.SUCCESS
    row = ClientConnection.objects.get(pk="23439-127.0.0.1@DEFAULT")
    assert (row.kind, row.language, row.version) == ("PRODUCER", "CPP", "63")
    assert (row.producer_groups, row.topics) == (["PID_PROBE"], [topic])
    assert row.server == remoting_server.server.server_id
    assert row.disconnected_timestamp is None
    assert remoting_server.server.connections_of("23439-127.0.0.1@DEFAULT")
    ext = {"clientID": "23439-127.0.0.1@DEFAULT", "producerGroup": "PID_PROBE", "consumerGroup": ""}
    assert client.request(codes.UNREGISTER_CLIENT, ext).code == codes.SUCCESS
    row.refresh_from_db()
    assert row.disconnected_timestamp is not None


@pytest.mark.parametrize("body", [b"not json", b'{"producerDataSet":[]}'])
def test_a_heartbeat_without_client_id_is_refused(client: FrameClient, body):
    assert client.request(codes.HEART_BEAT, {}, body).code == codes.SYSTEM_ERROR
    assert not ClientConnection.objects.exists()


def test_an_unserved_code_is_request_code_not_supported(client: FrameClient):
    response = client.request(11, {"topic": "T"})
    assert response.code == codes.REQUEST_CODE_NOT_SUPPORTED
    assert "11" in response.remark


def test_anonymous_requests_are_refused_unless_allowed(
    client: FrameClient, topic, remoting_settings
):
    remoting_settings.HALFMOON_REMOTING_ALLOW_ANONYMOUS = False
    response = client.request(codes.SEND_MESSAGE, send_ext(topic), b"b")
    assert response.code == codes.NO_PERMISSION
    assert "HALFMOON_REMOTING_ALLOW_ANONYMOUS" in response.remark
    assert not Message.objects.exists()

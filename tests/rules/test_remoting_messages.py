"""broker.rules.remoting_messages: the properties string, the offsetMsgId, SEND_MESSAGE_V2's
short names, END_TRANSACTION's fields and the binary MessageExt, byte for byte."""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.rules.remoting_messages import (
    MESSAGE_MAGIC_CODE,
    MessageExt,
    end_action,
    from_transaction_check,
    message_ext_encode,
    offset_msg_id,
    offset_msg_id_parse,
    properties_decode,
    properties_encode,
    v2_header_expand,
)


def test_properties_decode_of_the_cpp_client():
    text = "KEYS\x01key-0\x02TAGS\x01TagA\x02UNIQ_KEY\x010100\x02WAIT\x01true\x02userProp\x01v0\x02"
    assert properties_decode(text) == {
        "KEYS": "key-0",
        "TAGS": "TagA",
        "UNIQ_KEY": "0100",
        "WAIT": "true",
        "userProp": "v0",
    }


def test_properties_decode_skips_broken_entries():
    assert properties_decode("") == {}
    assert properties_decode("a\x01\x02noseparator\x02\x01v\x02a\x01x=y") == {"a": "x=y"}


def test_properties_encode():
    assert properties_encode({"TAGS": "TagA", "k": ""}) == "TAGS\x01TagA\x02k\x01\x02"
    assert properties_encode({}) == ""


def test_offset_msg_id_of_the_reference():
    assert offset_msg_id("127.0.0.1", 19911, 1000) == "7F00000100004DC700000000000003E8"
    assert offset_msg_id("10.1.2.3", 10911, 2**40 + 5) == "0A01020300002A9F0000010000000005"
    assert offset_msg_id_parse("7F00000100004DC700000000000003E8") == ("127.0.0.1", 19911, 1000)


@pytest.mark.parametrize("bad", ["NOT-A-HEX-ID", "7F00000100004DC700000000000003E", ""])
def test_offset_msg_id_parse_refuses(bad):
    with pytest.raises(ValueError):
        offset_msg_id_parse(bad)


def test_offset_msg_id_needs_ipv4():
    with pytest.raises(ValueError):
        offset_msg_id("broker.example", 1, 1)


def test_v2_header_expand():
    assert v2_header_expand(
        {
            "a": "PG",
            "b": "T",
            "c": "TBW102",
            "d": "4",
            "e": "1",
            "f": "4",
            "g": "9",
            "h": "0",
            "i": "p",
            "j": "0",
            "k": "false",
            "l": "false",
            "m": "16",
            "AccessKey": "",
        }
    ) == {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "4",
        "bornTimestamp": "9",
        "flag": "0",
        "properties": "p",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
        "maxReconsumeTimes": "16",
        "AccessKey": "",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        (" 1 ", True),
        ("0", False),
        ("false", False),
        ("", False),
        ("2", False),
    ],
)
def test_from_transaction_check(value, expected):
    assert from_transaction_check(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("8", "commit"), ("12", "rollback"), ("0", "unknown"), ("4", None), ("x", None), ("", None)],
)
def test_end_action(value, expected):
    assert end_action(value) == expected


def test_message_ext_of_the_reference_size():
    record = message_ext_encode(
        MessageExt(
            topic="TopicProbe",
            body=b"hello-0-TagA",
            properties={"TAGS": "TagA", "padding": "x" * 72},
        )
    )
    assert len(record) == 84 + 4 + 12 + 1 + 10 + 2 + len(
        "TAGS\x01TagA\x02padding\x01" + "x" * 72 + "\x02"
    )
    assert struct.unpack(">i", record[:4])[0] == len(record)


def test_message_ext_bytes():
    body = b"body"
    record = message_ext_encode(
        MessageExt(
            topic="T",
            body=body,
            properties={"a": "b"},
            queue_id=3,
            flag=5,
            queue_offset=7,
            commit_log_offset=1000,
            sys_flag=4 | 0x30,
            born_timestamp=11,
            born_host=("10.0.0.2", 4000),
            store_timestamp=12,
            store_host=("127.0.0.1", 10911),
            reconsume_times=2,
            prepared_transaction_offset=99,
        )
    )
    expected = (
        struct.pack(">i", 84 + 4 + 4 + 1 + 1 + 2 + 4)
        + bytes.fromhex("DAA320A7")
        + struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
        + struct.pack(">iiqqiq", 3, 5, 7, 1000, 4, 11)
        + bytes([10, 0, 0, 2])
        + struct.pack(">i", 4000)
        + struct.pack(">q", 12)
        + bytes([127, 0, 0, 1])
        + struct.pack(">i", 10911)
        + struct.pack(">iqi", 2, 99, 4)
        + body
        + b"\x01T"
        + b"\x00\x04a\x01b\x02"
    )
    assert record == expected
    assert MESSAGE_MAGIC_CODE == 0xDAA320A7


def test_message_ext_crc_is_positive():
    body = b"\xff" * 3
    assert zlib.crc32(body) > 0x7FFFFFFF  # the case the mask matters for
    record = message_ext_encode(MessageExt(topic="T", body=body, properties={}))
    assert struct.unpack(">i", record[8:12])[0] == zlib.crc32(body) & 0x7FFFFFFF


def test_message_ext_limits():
    assert (
        len(message_ext_encode(MessageExt(topic="t" * 255, body=b"", properties={})))
        == 84 + 4 + 256 + 2
    )
    with pytest.raises(ValueError):
        message_ext_encode(MessageExt(topic="t" * 256, body=b"", properties={}))
    big = {"k": "v" * (0xFFFF - 3)}
    assert (
        len(message_ext_encode(MessageExt(topic="", body=b"", properties=big)))
        == 84 + 4 + 1 + 2 + 0xFFFF
    )
    with pytest.raises(ValueError):
        message_ext_encode(MessageExt(topic="", body=b"", properties={"k": "v" * (0xFFFF - 2)}))


def test_properties_decode_splits_at_the_first_separator():
    assert properties_decode("a\x01b\x01c\x02") == {"a": "b\x01c"}


def test_offset_msg_id_is_signed_like_java():
    assert offset_msg_id("127.0.0.1", -1, -1) == "7F000001" + "F" * 24
    assert offset_msg_id_parse("7F000001" + "F" * 24) == ("127.0.0.1", -1, -1)


def test_offset_msg_id_parse_says_why():
    with pytest.raises(ValueError, match="an offsetMsgId has 32 hex characters, not 12"):
        offset_msg_id_parse("NOT-A-HEX-ID")


def test_message_ext_signed_fields_and_flags():
    record = message_ext_encode(
        MessageExt(
            topic="T",
            body=b"",
            properties={},
            queue_id=-1,
            flag=-2,
            queue_offset=-3,
            commit_log_offset=-4,
            sys_flag=0x1 | 0x4 | 0x30,
            born_timestamp=-5,
            born_host=("1.2.3.4", -6),
            store_timestamp=-7,
            store_host=("5.6.7.8", -8),
            reconsume_times=-9,
            prepared_transaction_offset=-10,
        )
    )
    assert struct.unpack_from(">iiqqiq", record, 12) == (-1, -2, -3, -4, 5, -5)
    assert record[48:56] == bytes([1, 2, 3, 4]) + struct.pack(">i", -6)
    assert struct.unpack_from(">q", record, 56) == (-7,)
    assert record[64:72] == bytes([5, 6, 7, 8]) + struct.pack(">i", -8)
    assert struct.unpack_from(">iqi", record, 72) == (-9, -10, 0)


def test_message_ext_limits_say_why():
    with pytest.raises(ValueError, match="^a topic takes at most 255 bytes$"):
        message_ext_encode(MessageExt(topic="t" * 256, body=b"", properties={}))
    with pytest.raises(ValueError, match="^properties take at most 65535 bytes$"):
        message_ext_encode(MessageExt(topic="", body=b"", properties={"k": "v" * 0xFFFF}))

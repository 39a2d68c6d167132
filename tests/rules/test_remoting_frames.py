"""broker.rules.remoting_frames: RocketMQ 4.x frames with JSON and binary headers, extFields
read as their writer wrote them, responses."""

from __future__ import annotations

import json
import struct

import pytest

from broker.rules.remoting_frames import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FRAME_MAX,
    FrameError,
    RemotingCommand,
    ext_str,
    frame_decode,
    frame_encode,
    frame_length,
    response_of,
)


def _json_frame(header: dict, body: bytes = b"", serialize_type: int = 0) -> bytes:
    encoded = json.dumps(header).encode()
    return struct.pack(">I", (serialize_type << 24) | len(encoded)) + encoded + body


def test_ext_str_keeps_the_writers_text():
    assert ext_str("0") == "0"
    assert ext_str(4) == "4"
    assert ext_str(True) == "true"
    assert ext_str(False) == "false"
    assert ext_str(None) == ""
    assert ext_str(1.5) == "1.5"


def test_json_request_of_the_cpp_client():
    frame = _json_frame(
        {
            "code": 10,
            "extFields": {"queueId": 0, "sysFlag": 4, "bornTimestamp": "1796158156993", "x": True},
            "flag": 0,
            "language": "CPP",
            "opaque": 7,
            "remark": "",
            "version": 63,
        },
        b"hello",
    )
    command = frame_decode(frame)
    assert command == RemotingCommand(
        code=10,
        opaque=7,
        flag=0,
        language="CPP",
        version=63,
        remark="",
        ext_fields={"queueId": "0", "sysFlag": "4", "bornTimestamp": "1796158156993", "x": "true"},
        body=b"hello",
    )
    assert not command.oneway


def test_json_header_defaults_and_oneway():
    command = frame_decode(_json_frame({"code": 37, "flag": 2}))
    assert (command.opaque, command.language, command.version, command.remark) == (0, "JAVA", 0, "")
    assert command.ext_fields == {}
    assert command.body == b""
    assert command.oneway


def _binary_header(code, language, version, opaque, flag, remark: bytes, ext: list) -> bytes:
    entries = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext
    )
    return (
        struct.pack(">hBhiii", code, language, version, opaque, flag, len(remark))
        + remark
        + struct.pack(">i", len(entries))
        + entries
    )


def test_binary_header():
    header = _binary_header(105, 1, 63, 9, 0, b"hi", [(b"topic", b"T1"), (b"k", b"")])
    frame = struct.pack(">i", (1 << 24) | len(header)) + header + b"B"
    command = frame_decode(frame)
    assert command == RemotingCommand(
        code=105,
        opaque=9,
        flag=0,
        language="CPP",
        version=63,
        remark="hi",
        ext_fields={"topic": "T1", "k": ""},
        body=b"B",
    )


def test_binary_header_unknown_language_and_no_remark():
    header = _binary_header(34, 200, 1, 1, 2, b"", [])
    command = frame_decode(struct.pack(">i", (1 << 24) | len(header)) + header)
    assert (command.language, command.remark, command.ext_fields, command.flag) == (
        "OTHER",
        "",
        {},
        2,
    )


def test_binary_header_overrun_is_refused():
    header = _binary_header(34, 0, 1, 1, 0, b"", [(b"a", b"b")])
    broken = header[:-1]
    with pytest.raises(FrameError):
        frame_decode(struct.pack(">i", (1 << 24) | len(broken)) + broken)


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x00",
        struct.pack(">i", 50) + b"{}",
        _json_frame({"code": 1}, serialize_type=2),
        _json_frame({"nocode": 1}),
        struct.pack(">i", 3) + b"{x}",
    ],
)
def test_unreadable_frames(frame):
    with pytest.raises(FrameError):
        frame_decode(frame)


def test_frame_length_bounds():
    assert frame_length(struct.pack(">i", 4)) == 4
    assert frame_length(struct.pack(">i", FRAME_MAX)) == FRAME_MAX
    with pytest.raises(FrameError):
        frame_length(struct.pack(">i", 3))
    with pytest.raises(FrameError):
        frame_length(struct.pack(">i", FRAME_MAX + 1))


def test_response_encoding_is_exact():
    request = RemotingCommand(code=105, opaque=3, language="CPP", version=63)
    response = response_of(request, 17, remark="no topic", ext_fields={"queueId": 2}, body=b"xy")
    assert response.flag == FLAG_RESPONSE
    encoded = frame_encode(response)
    header = (
        b'{"code":17,"language":"JAVA","version":401,"opaque":3,"flag":1,"remark":"no topic",'
        b'"extFields":{"queueId":"2"},"serializeTypeCurrentRPC":"JSON"}'
    )
    assert encoded == struct.pack(">ii", 4 + len(header) + 2, len(header)) + header + b"xy"
    decoded = frame_decode(encoded[4:])
    assert decoded == RemotingCommand(
        code=17,
        opaque=3,
        flag=1,
        language="JAVA",
        version=401,
        remark="no topic",
        ext_fields={"queueId": "2"},
        body=b"xy",
    )
    assert FLAG_ONEWAY == 2


def test_json_header_without_flag_opaque_or_version():
    command = frame_decode(_json_frame({"code": 34, "language": None}))
    assert (command.flag, command.opaque, command.version, command.language) == (0, 0, 0, "JAVA")
    assert not command.oneway


def test_ext_str_of_containers_is_their_json():
    assert ext_str([1, "a"]) == '[1, "a"]'


def test_binary_header_signed_fields_one_char_remark_and_last_language():
    header = _binary_header(-2, 9, -3, -1, -5, b"r", [(b"key", b"")])
    command = frame_decode(struct.pack(">i", (1 << 24) | len(header)) + header)
    assert (command.code, command.version, command.opaque, command.flag) == (-2, -3, -1, -5)
    assert (command.language, command.remark, command.ext_fields) == ("GO", "r", {"key": ""})
    unknown = _binary_header(1, 10, 1, 1, 0, b"", [])
    assert frame_decode(struct.pack(">i", (1 << 24) | len(unknown)) + unknown).language == "OTHER"


def test_binary_header_negative_remark_length_is_none():
    header = struct.pack(">hBhiii", 1, 0, 1, 1, 0, -1) + struct.pack(">i", 0)
    command = frame_decode(struct.pack(">i", (1 << 24) | len(header)) + header)
    assert (command.remark, command.ext_fields) == ("", {})


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            _binary_header(34, 0, 1, 1, 0, b"", [(b"a", b"b")])[:-1],
            "end at 29, beyond its 28 bytes",
        ),
        (struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", -1), "end at 21, not at 20"),
        (struct.pack(">hBhii", 1, 0, 1, 1, 0), "4-byte field at 13 beyond 13 bytes"),
        (
            _binary_header(34, 0, 1, 1, 0, b"\xff", []),
            "binary header not UTF-8: invalid start byte",
        ),
        (_binary_header(34, 0, 1, 1, 0, b"", [(b"\xff", b"")]), "not UTF-8"),
        (_binary_header(34, 0, 1, 1, 0, b"", [(b"k", b"\xff")]), "not UTF-8"),
    ],
)
def test_binary_header_refusals(header, message):
    """Each refusal names its cause (a value too long for its entry is an overrun too)."""
    with pytest.raises(FrameError, match=message):
        frame_decode(struct.pack(">i", (1 << 24) | len(header)) + header)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "header length 0 beyond the frame"),
        (b"\x00\x00", "header length 0 beyond the frame"),
        (struct.pack(">i", 50) + b"{}", "header length 50 beyond the frame"),
        (struct.pack(">i", 0x10000) + b"{}", "header length 65536 beyond the frame"),
        (_json_frame({"code": 1}, serialize_type=2), "unknown serializeType 2"),
        (_json_frame({"code": 1}, serialize_type=255), "unknown serializeType 255"),
        (_json_frame({"nocode": 1}), "unreadable JSON header: 'code'"),
        (struct.pack(">i", 0), "unreadable JSON header: Expecting value"),
    ],
)
def test_unreadable_frames_say_why(frame, message):
    with pytest.raises(FrameError, match=message):
        frame_decode(frame)


def test_frame_length_is_signed():
    with pytest.raises(FrameError, match="frame length -5 out of range"):
        frame_length(struct.pack(">i", -5))
    with pytest.raises(FrameError, match="4-byte field at 0 beyond 3 bytes"):
        frame_length(b"\x00\x00\x04")


def test_response_defaults():
    response = response_of(RemotingCommand(code=34, opaque=5), 0)
    assert response == RemotingCommand(
        code=0, opaque=5, flag=1, language="JAVA", version=401, remark="", ext_fields={}, body=b""
    )


def test_binary_header_entry_overrunning_its_length():
    entries = struct.pack(">h", 1) + b"k" + struct.pack(">i", 3) + b"vvv"
    header = (
        struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", len(entries) - 2) + entries
    )
    with pytest.raises(FrameError, match="end at 31, not at 29"):
        frame_decode(struct.pack(">i", (1 << 24) | len(header)) + header)

"""RocketMQ 4.x remoting frames (Java ``RemotingCommand``, ``RocketMQSerializable``): the length
prefix, the JSON header (serializeType 0) and the ROCKETMQ binary header (serializeType 1),
the extFields values read as the client wrote them.

A frame is ``[int32 total = 4 + headerLen + bodyLen][int32 (serializeType << 24) | headerLen]
[header][body]``, big-endian. More: docs/rocketmq-clients.md, "RocketMQ 4.x clients".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

FLAG_RESPONSE = 1
"""``RemotingCommand`` flag bit0: the frame is a response (``RPC_TYPE``)."""
FLAG_ONEWAY = 2
"""Flag bit1: the sender expects no response (``RPC_ONEWAY``)."""

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO")
"""Java ``LanguageCode`` by ordinal (the binary header's language byte)."""

FRAME_MAX = 16 * 1024 * 1024
"""The largest frame read (Java ``NettyDecoder`` FRAME_MAX_LENGTH default, 16 MiB)."""


class FrameError(ValueError):
    """A frame that cannot be read: the connection is closed."""


@dataclass
class RemotingCommand:
    """One decoded frame: ``code`` (request code, or response code when ``flag`` has
    ``FLAG_RESPONSE``), ``opaque`` (the request id a response repeats), ``ext_fields``
    (every value a string, ``ext_str``), ``body`` (bytes)."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = 0
    remark: str = ""
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def oneway(self) -> bool:
        """Whether the sender marked it oneway (``FLAG_ONEWAY``)."""
        return bool(self.flag & FLAG_ONEWAY)


def ext_str(value: Any) -> str:
    """An extFields value as its writer's text: a JSON string as is, ``true``/``false`` for a
    boolean, a number's JSON text, ``""`` for null (the cpp client mixes JSON ints and strings;
    Java sends every value as ``String.valueOf``; the ACL signature signs this text)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value)


def _int(data: bytes, at: int, size: int) -> int:
    """The big-endian signed integer of ``size`` bytes at ``at`` (Java's int types).

    Raises:
        FrameError: ``data`` ends before it.
    """
    if at + size > len(data):
        raise FrameError(f"{size}-byte field at {at} beyond {len(data)} bytes")
    return int.from_bytes(data[at : at + size], "big", signed=True)


def frame_length(prefix: bytes) -> int:
    """The bytes that follow a frame's 4-byte length ``prefix`` (its ``total``).

    Raises:
        FrameError: shorter than the header-length field, or above ``FRAME_MAX``.
    """
    total = _int(prefix, 0, 4)
    if total < 4 or total > FRAME_MAX:
        raise FrameError(f"frame length {total} out of range")
    return total


def frame_decode(frame: bytes) -> RemotingCommand:
    """Decode a frame without its length prefix (header-length field, header, body).

    Raises:
        FrameError: a header that does not fit, an unknown serializeType, an unreadable header.
    """
    header_length = int.from_bytes(frame[1:4], "big")
    if 4 + header_length > len(frame):
        raise FrameError(f"header length {header_length} beyond the frame")
    serialize_type = frame[0]
    header = frame[4 : 4 + header_length]
    body = frame[4 + header_length :]
    if serialize_type == SERIALIZE_JSON:
        command = _json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        command = _binary_header(header)
    else:
        raise FrameError(f"unknown serializeType {serialize_type}")
    command.body = body
    return command


def _json_header(header: bytes) -> RemotingCommand:
    try:
        data = json.loads(header.decode())
        ext = data.get("extFields") or {}
        return RemotingCommand(
            code=int(data["code"]),
            opaque=int(data.get("opaque") or 0),
            flag=int(data.get("flag") or 0),
            language=str(data.get("language") or "JAVA"),
            version=int(data.get("version") or 0),
            remark=ext_str(data.get("remark")),
            ext_fields={str(k): ext_str(v) for k, v in ext.items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FrameError(f"unreadable JSON header: {exc}") from None


def _binary_header(header: bytes) -> RemotingCommand:
    """Java ``RocketMQSerializable.rocketMQProtocolDecode``: code i16, language u8, version
    i16, opaque i32, flag i32, remark (i32 length + UTF-8), extFields (i32 total length, then
    per entry i16 key length + key, i32 value length + value).

    Raises:
        FrameError: a field beyond the header, entries overrunning their length, bad UTF-8.
    """
    remark_length = max(_int(header, 13, 4), 0)
    language = header[2]
    at = 17 + remark_length
    remark = header[17:at]
    ext_end = at + 4 + _int(header, at, 4)
    at += 4
    if ext_end > len(header):
        raise FrameError(
            f"binary header extFields end at {ext_end}, beyond its {len(header)} bytes"
        )
    entries: list[tuple[bytes, bytes]] = []
    while at < ext_end:
        key_length = _int(header, at, 2)
        key = header[at + 2 : at + 2 + key_length]
        at += 2 + key_length
        value_length = _int(header, at, 4)
        entries.append((key, header[at + 4 : at + 4 + value_length]))
        at += 4 + value_length
    if at != ext_end:
        raise FrameError(f"binary header extFields end at {at}, not at {ext_end}")
    try:
        return RemotingCommand(
            code=_int(header, 0, 2),
            opaque=_int(header, 5, 4),
            flag=_int(header, 9, 4),
            language=LANGUAGES[language] if language < len(LANGUAGES) else "OTHER",
            version=_int(header, 3, 2),
            remark=remark.decode(),
            ext_fields={k.decode(): v.decode() for k, v in entries},
        )
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header not UTF-8: {exc.reason}") from None


def frame_encode(command: RemotingCommand) -> bytes:
    """A whole frame (length prefix included) with a JSON header (serializeType 0): code,
    language, version, opaque, flag, remark, extFields (string values), and the body (the
    answer the cpp client accepted: reference section 1)."""
    header = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "remark": command.remark,
        "extFields": {k: ext_str(v) for k, v in command.ext_fields.items()},
        "serializeTypeCurrentRPC": "JSON",
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    total = 4 + len(encoded) + len(command.body)
    return total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big") + encoded + command.body


def response_of(
    request: RemotingCommand,
    code: int,
    *,
    remark: str = "",
    ext_fields: dict[str, Any] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """The response to ``request``: its opaque, ``FLAG_RESPONSE``, language JAVA (the
    default), version 401 (V4_9_4, as a 4.x broker answers)."""
    return RemotingCommand(
        code=code,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        version=401,
        remark=remark,
        ext_fields={k: ext_str(v) for k, v in (ext_fields or {}).items()},
        body=body,
    )

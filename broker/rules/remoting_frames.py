"""RocketMQ 4.x remoting frames (Java ``RemotingCommand``, ``RocketMQSerializable``): the length
prefix, the JSON header (serializeType 0) and the ROCKETMQ binary header (serializeType 1),
the extFields values read as the client wrote them.

A frame is ``[int32 total = 4 + headerLen + bodyLen][int32 (serializeType << 24) | headerLen]
[header][body]``, big-endian. More: docs/rocketmq-clients.md, "RocketMQ 4.x clients".
"""

from __future__ import annotations

import json
import struct
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
    return json.dumps(value, separators=(",", ":"))


def frame_length(prefix: bytes) -> int:
    """The bytes that follow a frame's 4-byte length ``prefix`` (its ``total``).

    Raises:
        FrameError: shorter than the header-length field, or above ``FRAME_MAX``.
    """
    (total,) = struct.unpack(">i", prefix)
    if total < 4 or total > FRAME_MAX:
        raise FrameError(f"frame length {total} out of range")
    return total


def frame_decode(frame: bytes) -> RemotingCommand:
    """Decode a frame without its length prefix (header-length field, header, body).

    Raises:
        FrameError: a header that does not fit, an unknown serializeType, an unreadable header.
    """
    if len(frame) < 4:
        raise FrameError("frame shorter than its header length")
    (mark,) = struct.unpack(">i", frame[:4])
    serialize_type = (mark >> 24) & 0xFF
    header_length = mark & 0xFFFFFF
    if 4 + header_length > len(frame):
        raise FrameError(f"header length {header_length} beyond the frame")
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
        data = json.loads(header.decode("utf-8"))
        ext = data.get("extFields") or {}
        return RemotingCommand(
            code=int(data["code"]),
            opaque=int(data.get("opaque", 0)),
            flag=int(data.get("flag", 0)),
            language=str(data.get("language", "JAVA")),
            version=int(data.get("version", 0)),
            remark=ext_str(data.get("remark")),
            ext_fields={str(k): ext_str(v) for k, v in ext.items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FrameError(f"unreadable JSON header: {exc}") from None


def _binary_header(header: bytes) -> RemotingCommand:
    """Java ``RocketMQSerializable.rocketMQProtocolDecode``: code i16, language u8, version
    i16, opaque i32, flag i32, remark (i32 length + UTF-8), extFields (i32 total length, then
    per entry i16 key length + key, i32 value length + value)."""
    try:
        code, language, version, opaque, flag, remark_length = struct.unpack_from(
            ">hBhiii", header, 0
        )
        at = 17
        remark = header[at : at + remark_length].decode("utf-8") if remark_length > 0 else ""
        at += max(remark_length, 0)
        (ext_length,) = struct.unpack_from(">i", header, at)
        at += 4
        end = at + ext_length
        ext: dict[str, str] = {}
        while at < end:
            (key_length,) = struct.unpack_from(">h", header, at)
            key = header[at + 2 : at + 2 + key_length].decode("utf-8")
            at += 2 + key_length
            (value_length,) = struct.unpack_from(">i", header, at)
            ext[key] = header[at + 4 : at + 4 + value_length].decode("utf-8")
            at += 4 + value_length
        if at != end or end > len(header):
            raise FrameError("binary header extFields overrun")
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"unreadable binary header: {exc}") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=LANGUAGES[language] if language < len(LANGUAGES) else "OTHER",
        version=version,
        remark=remark,
        ext_fields=ext,
    )


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
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return (
        struct.pack(">ii", 4 + len(encoded) + len(command.body), len(encoded))
        + encoded
        + command.body
    )


def response_of(
    request: RemotingCommand,
    code: int,
    *,
    remark: str = "",
    ext_fields: dict[str, Any] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """The response to ``request``: its opaque, ``FLAG_RESPONSE``, language JAVA, version
    401 (V4_9_4, as a 4.x broker answers)."""
    return RemotingCommand(
        code=code,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        language="JAVA",
        version=401,
        remark=remark,
        ext_fields={k: ext_str(v) for k, v in (ext_fields or {}).items()},
        body=body,
    )

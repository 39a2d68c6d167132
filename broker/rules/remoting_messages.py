"""Messages as RocketMQ 4.x remoting carries them: the properties string, the offsetMsgId,
the binary MessageExt, the send header's short names, the transaction states (Java
``MessageDecoder``, ``MessageSysFlag``, ``SendMessageRequestHeaderV2``)."""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

MESSAGE_MAGIC_CODE = 0xDAA320A7
"""Java ``MessageDecoder.MESSAGE_MAGIC_CODE`` (-626843481 as an int32)."""

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_MASK = 0xC

END_ACTIONS = {0: "unknown", 8: "commit", 12: "rollback"}
"""END_TRANSACTION ``commitOrRollback`` (Java ``MessageSysFlag.TRANSACTION_*_TYPE``) -> action."""

V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "batch",
    "m": "maxReconsumeTimes",
}
"""SEND_MESSAGE_V2 (310) short field names -> SEND_MESSAGE (10) names
(Java ``SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1``)."""


def properties_decode(text: str) -> dict[str, str]:
    """``k\\x01v\\x02...`` -> dict (Java ``MessageDecoder.string2messageProperties``): entries
    without a separator or with an empty name are skipped; a later name wins."""
    properties: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            properties[name] = value
    return properties


def properties_encode(properties: Mapping[str, str]) -> str:
    """dict -> ``k\\x01v\\x02...`` with a trailing separator, in the mapping's order (Java
    ``MessageDecoder.messageProperties2String``)."""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    )


def v2_header_expand(ext_fields: Mapping[str, str]) -> dict[str, str]:
    """A SEND_MESSAGE_V2 header with the long names of SEND_MESSAGE (``V2_NAMES``); other
    fields (AccessKey, Signature, ...) are kept as they are."""
    return {V2_NAMES.get(k, k): v for k, v in ext_fields.items()}


def offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """The offsetMsgId: 32 upper-case hex of the 4-byte IPv4 ``host``, the 4-byte ``port`` and
    the 8-byte commit log offset, big-endian (Java ``MessageDecoder.createMessageId``). The cpp
    client decodes the offset from it for END_TRANSACTION.

    Raises:
        ValueError: ``host`` is no IPv4 address, or a field out of range.
    """
    packed = ipaddress.IPv4Address(host).packed + struct.pack(">iq", port, commit_log_offset)
    return packed.hex().upper()


def offset_msg_id_parse(msg_id: str) -> tuple[str, int, int]:
    """(host, port, commit log offset) of an offsetMsgId (``offset_msg_id``'s inverse).

    Raises:
        ValueError: not 32 hex characters.
    """
    if len(msg_id) != 32:
        raise ValueError(f"an offsetMsgId has 32 hex characters, not {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    port, offset = struct.unpack(">iq", raw[4:])
    return str(ipaddress.IPv4Address(raw[:4])), port, offset


def from_transaction_check(value: str) -> bool:
    """END_TRANSACTION's ``fromTransactionCheck``: ``"1"``/``"true"`` (any case) is a check's
    answer (cpp sends 0/1, Java false/true)."""
    return value.strip().lower() in ("1", "true")


def end_action(commit_or_rollback: str) -> str | None:
    """The action of END_TRANSACTION's ``commitOrRollback`` (``END_ACTIONS``), or None."""
    try:
        return END_ACTIONS.get(int(commit_or_rollback))
    except ValueError:
        return None


@dataclass(frozen=True)
class MessageExt:
    """What one binary MessageExt record carries (Java ``MessageExt``): times in ms, hosts as
    (IPv4, port)."""

    topic: str
    body: bytes
    properties: Mapping[str, str]
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


def _host(host: tuple[str, int]) -> bytes:
    return ipaddress.IPv4Address(host[0]).packed + host[1].to_bytes(4, "big", signed=True)


def message_ext_encode(message: MessageExt) -> bytes:
    """One binary MessageExt record (Java ``MessageDecoder.decode``'s layout, big-endian):
    TOTALSIZE, MAGICCODE, BODYCRC (``crc32 & 0x7FFFFFFF``), QUEUEID, FLAG, QUEUEOFFSET,
    PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST,
    RECONSUMETIMES, PreparedTransactionOffset, BODY (i32 length), TOPIC (u8 length),
    PROPERTIES (u16 length). IPv4 hosts only (the v6 sysFlag bits are cleared).

    Raises:
        ValueError: a topic over 255 or properties over 65535 bytes of UTF-8.
    """
    topic = message.topic.encode()
    properties = properties_encode(message.properties).encode()
    if len(topic) > 255:
        raise ValueError("a topic takes at most 255 bytes")
    if len(properties) > 0xFFFF:
        raise ValueError("properties take at most 65535 bytes")
    body = message.body
    total = 84 + 4 + len(body) + 1 + len(topic) + 2 + len(properties)
    return b"".join(
        (
            struct.pack(
                ">iIiiiqqiq",
                total,
                MESSAGE_MAGIC_CODE,
                zlib.crc32(body) & 0x7FFFFFFF,
                message.queue_id,
                message.flag,
                message.queue_offset,
                message.commit_log_offset,
                message.sys_flag & ~0x30,
                message.born_timestamp,
            ),
            _host(message.born_host),
            struct.pack(">q", message.store_timestamp),
            _host(message.store_host),
            struct.pack(
                ">iqi", message.reconsume_times, message.prepared_transaction_offset, len(body)
            ),
            body,
            struct.pack(">B", len(topic)),
            topic,
            struct.pack(">H", len(properties)),
            properties,
        )
    )

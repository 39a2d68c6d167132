"""The body of an Op message (RocketMQ RIP-50, ``TransactionalMessageServiceImpl``): the half
queue offsets it marks as done, as ASCII decimals each followed by a comma, e.g. ``b"12,13,"``.
A 4.x broker writes one offset with no comma (``b"12"``); both read the same."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SEPARATOR = b","


@dataclass(frozen=True)
class OpBody:
    """A parsed Op body: ``offsets`` in the order written, and ``invalid`` parts that are not
    non-negative decimal integers (at most 40 bytes of each, for the log)."""

    offsets: list[int]
    invalid: list[bytes] = field(default_factory=list)


def op_body_format(offsets: Iterable[int]) -> bytes:
    """``[12, 13]`` -> ``b"12,13,"``: the body naming these half queue offsets.

    Raises:
        ValueError: a negative offset.
    """
    parts = []
    for offset in offsets:
        if offset < 0:
            raise ValueError(f"half queue offset {offset} is negative")
        parts.append(b"%d," % offset)
    return b"".join(parts)


def op_body_parse(body: bytes | memoryview) -> OpBody:
    """The offsets an Op body names. Empty parts are skipped (the trailing comma); a part that
    is not a decimal integer goes to ``invalid`` rather than raising, so each caller decides:
    the scan's checkpoint stops before such a message, the recovery reports and skips it."""
    offsets: list[int] = []
    invalid: list[bytes] = []
    for part in bytes(body).split(SEPARATOR):
        part = part.strip()
        if not part:
            continue
        if part.isdigit():
            offsets.append(int(part))
        else:
            invalid.append(part[:40])
    return OpBody(offsets=offsets, invalid=invalid)


def op_body_size(offsets: Iterable[int]) -> int:
    """The length in bytes of ``op_body_format(offsets)``, without building it (RIP-50's
    transactionOpMsgMaxSize is checked against it)."""
    return sum(len(str(o)) + 1 for o in offsets)

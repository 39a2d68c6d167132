"""FIFO message groups: what a message group may be, which queue holds it, and which messages of
a queue a FIFO consumer group's receive may take (each message group's head only, in queue
order). See docs/design.md, "FIFO message groups"."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

MESSAGE_GROUP_MAX_LENGTH = 64
"""The longest message group (characters): RocketMQ ProxyConfig ``maxMessageGroupSize``, and
``Message.message_group``'s column."""


def message_group_problem(message_group: str) -> str | None:
    """Why ``message_group`` cannot name a FIFO message's group, or None when it can: blank
    (empty or only whitespace), longer than ``MESSAGE_GROUP_MAX_LENGTH`` characters, or holding
    a control character (RocketMQ proxy ``GrpcValidator.validateMessageGroup``:
    ILLEGAL_MESSAGE_GROUP)."""
    if not message_group.strip():
        return "The message group is blank."
    if len(message_group) > MESSAGE_GROUP_MAX_LENGTH:
        return f"The message group is longer than {MESSAGE_GROUP_MAX_LENGTH} characters."
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in message_group):
        return "The message group holds a control character."
    return None


def message_group_queue(message_group: str, queue_nums: int) -> int:
    """The queue id (0 .. ``queue_nums`` - 1) of every message of ``message_group``: the
    SHA-256 of its UTF-8 bytes, read as a big-endian integer, modulo ``queue_nums`` (the
    official Python client's ``select_queue_by_hash_key``), so a group's messages share one
    queue, in send order, whoever sends them."""
    digest = hashlib.sha256(message_group.encode("utf-8")).digest()
    return int.from_bytes(digest, "big") % queue_nums


class Slot(NamedTuple):
    """One message of a queue at or past a FIFO consumer group's offset of it."""

    queue_offset: int
    message_group: str  # "" for a message of no group: taken as a normal message
    matches: bool  # the receive's filter lets it through (a rejected one counts as consumed)


def fifo_pick(
    window: Sequence[Slot], *, offset: int, taken: Iterable[int], busy: set[str], want: int
) -> tuple[list[Slot], int]:
    """Which messages of one queue a FIFO consumer group's receive takes, and the queue's new
    offset. ``window``: the queue's messages from ``offset`` on, in queue order, contiguous;
    ``taken``: queue offsets of the window already taken (in flight, acked or dead-lettered);
    ``busy``: message groups that may not be taken now (a message in flight, or held by a
    concurrent receiver); it gains every group this pick takes or passes over. A group's
    first untaken message (its head) is taken when the group is not busy; its later ones never
    in the same pick. Messages of no group are taken as they come. At most ``want``.

    Returns:
        (the slots taken, in queue order; the new offset: the first queue offset of the window
        neither taken, nor taken now, nor rejected by the filter, else past the window's end,
        never below ``offset``).
    """
    done = set(taken)
    picked: list[Slot] = []
    next_offset: int | None = None
    for slot in window:
        if slot.queue_offset in done or not slot.matches:
            continue
        group = slot.message_group
        if len(picked) < want and not (group and group in busy):
            picked.append(slot)
        elif next_offset is None:
            next_offset = slot.queue_offset
        if group:
            busy.add(group)
    if next_offset is None:
        next_offset = window[-1].queue_offset + 1 if window else offset
    return picked, max(next_offset, offset)

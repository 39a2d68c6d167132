"""The Op log of a half queue as the rebuild reads it: which Op message first names each half
queue offset (RocketMQ's Op queue, ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, RIP-50 bodies ``12,13,14,``).

Op bodies are parsed by ``broker.rules.op_body.op_body_parse``; the rebuild is lenient: a part
that is not a half queue offset is logged and skipped, the rest of the message still counts.
"""

from __future__ import annotations

import logging
from array import array

from broker.constants import OP_HALF_TOPIC
from broker.models import Message
from broker.rules.op_body import op_body_parse

logger = logging.getLogger("halfmoon.recovery")

OP_READ_CHUNK = 2000  # Op messages fetched at a time (bodies of at most HALFMOON_OP_MSG_MAX_SIZE)


class OpIndex:
    """The Op log of one half queue: {half queue offset: commit log offset of the first Op
    message naming it}, as an array of 8-byte integers indexed by half queue offset (-1: not
    named). 8 bytes per half queue offset: 1,000,000 half messages take 8 MB.

    Offsets at or past ``bound`` (the half queue's next offset when the Op log was read) name
    no half message read so far and are ignored (counted in ``out_of_range``):
    ``op_named_verify`` reads such an Op message again if a journal row points at it.
    ``messages`` counts the Op messages added with ``message_add``.
    """

    def __init__(self, bound: int):
        self.bound = bound
        self._first = array("q", [-1]) * bound
        self.out_of_range = 0
        self.messages = 0

    def add(self, offset: int, op_commit_log_offset: int) -> None:
        """Record that the Op message at ``op_commit_log_offset`` names ``offset`` (the first
        Op message naming an offset is kept)."""
        if not 0 <= offset < self.bound:
            self.out_of_range += 1
            return
        if self._first[offset] == -1:
            self._first[offset] = op_commit_log_offset

    def message_add(self, body: bytes | memoryview, op_commit_log_offset: int) -> None:
        """Record every half queue offset the Op message ``body`` names."""
        self.messages += 1
        for offset in op_offsets(body):
            self.add(offset, op_commit_log_offset)

    def get(self, offset: int) -> int | None:
        """The commit log offset of the first Op message naming ``offset``, or None."""
        if 0 <= offset < self.bound and self._first[offset] != -1:
            return self._first[offset]
        return None


def op_offsets(body: bytes | memoryview) -> list[int]:
    """The half queue offsets an Op message names (``op_body_parse``); parts that are not
    offsets are logged and skipped."""
    parsed = op_body_parse(body)
    for part in parsed.invalid:
        logger.warning("Op message part %r is not a half queue offset", part)
    return parsed.offsets


def op_index_read(half_queue_id: int, bound: int) -> OpIndex:
    """Read the whole Op queue of ``half_queue_id`` (in queue offset order) into an
    ``OpIndex`` of offsets below ``bound`` (the half queue's next offset)."""
    ops = OpIndex(bound)
    for body, clo in (
        Message.objects.filter(topic=OP_HALF_TOPIC, queue_id=half_queue_id)
        .order_by("queue_offset")
        .values_list("body", "commit_log_offset")
        .iterator(chunk_size=OP_READ_CHUNK)
    ):
        ops.message_add(body, clo)
    if ops.out_of_range:
        logger.warning(
            "Op queue %d names %d offsets past half queue offset %d",
            half_queue_id,
            ops.out_of_range,
            bound,
        )
    return ops


def op_named_verify(half_queue_id: int, claims: dict[int, int]) -> set[int]:
    """Of ``claims`` ({half queue offset: Op commit log offset a journal row points at}), the
    half queue offsets whose Op message exists on this half queue's Op queue and names them."""
    if not claims:
        return set()
    bodies = dict(
        Message.objects.filter(
            pk__in=set(claims.values()), topic=OP_HALF_TOPIC, queue_id=half_queue_id
        ).values_list("commit_log_offset", "body")
    )
    named = {clo: set(op_offsets(body)) for clo, body in bodies.items()}
    return {offset for offset, clo in claims.items() if offset in named.get(clo, ())}

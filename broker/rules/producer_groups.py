"""Which Halfmoon producer group a half message sent over gRPC belongs to.

RocketMQ 5's clients send no producer group: a transactional producer names only its topics
(``Settings.publishing.topics``), and RocketMQ's proxy keys its producers by topic. Halfmoon
keys its transactions, back-checks, alerts and permissions by producer group, so a gRPC half
message is given one here, by one rule used by the send, the telemetry settings and the
console's connection lists.
"""

from __future__ import annotations

from collections.abc import Collection


def grpc_producer_group(*, topic: str, key_producer_groups: Collection[str] | None) -> str:
    """The producer group of a gRPC client publishing ``topic``.

    ``key_producer_groups``: the producer groups of the caller's access key, or None for an
    admin key and for an anonymous caller. A key holding exactly one producer group sends as
    that group, whatever the topic; otherwise (admin, anonymous, or a key with several or no
    groups) the group is the one named after the topic, ``topic`` itself. The caller's right
    to act for the group is checked afterwards, as over HTTP.
    """
    if key_producer_groups is not None and len(key_producer_groups) == 1:
        return next(iter(key_producer_groups))
    return topic

"""Reads of stored messages: one by msg id, those of a key."""

from __future__ import annotations

from django.db.models import QuerySet

from broker.errors import not_found
from broker.models import Message
from broker.rules.topics import is_system_topic
from broker.selectors.queries import key_match


def message_get(msg_id: str, *, producer_groups: list[str] | None = None) -> Message:
    """The message with ``msg_id`` as consumers see it: the delivered copy on a user topic if
    there is one, else the newest stored message with that id (a half message, a DLQ copy).

    ``producer_groups`` None means any group (admin); otherwise only messages those groups sent.

    Raises:
        NotFound: ``message_not_found`` (also when it exists but belongs to another group).
    """
    qs = Message.objects.filter(msg_id=msg_id)
    if producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    messages = list(qs.order_by("commit_log_offset"))
    for message in messages:
        if not is_system_topic(message.topic):
            return message
    if messages:
        return messages[-1]
    raise not_found("message", msg_id)


def messages_by_key(
    *, topic: str, key: str, producer_groups: list[str] | None = None
) -> QuerySet[Message]:
    """Messages of ``topic`` whose space-separated ``keys`` contain ``key`` (RocketMQ
    queryMessage by key), oldest first."""
    qs = Message.objects.filter(topic=topic).filter(key_match(key))
    if producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    return qs.order_by("commit_log_offset")


def message_at(commit_log_offset: int) -> Message | None:
    """The stored message at ``commit_log_offset`` (body and properties loaded), or None when
    the database no longer holds it (expired past ``HALFMOON_FILE_RESERVED_HOURS``, pruned)."""
    return Message.objects.filter(pk=commit_log_offset).first()

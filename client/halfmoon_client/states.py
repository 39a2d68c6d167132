"""``LocalTransactionState``: what a local transaction (or a back-check) answers, with
RocketMQ's spelling, and its ``action`` in the end request of api-v1."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal


class LocalTransactionState(StrEnum):
    """The state of a local transaction (RocketMQ ``LocalTransactionState``).

    The spelling ``UNKNOW`` is RocketMQ's own.
    """

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def action(self) -> Literal["commit", "rollback", "unknown"]:
        """The ``action`` of ``POST /api/v1/transactions/{id}/end`` for this state."""
        if self is LocalTransactionState.COMMIT_MESSAGE:
            return "commit"
        if self is LocalTransactionState.ROLLBACK_MESSAGE:
            return "rollback"
        return "unknown"

    @classmethod
    def coerce(cls, value: Any) -> LocalTransactionState:
        """A listener's answer as a state: a member, or its name (``UNKNOWN`` accepted);
        anything else (None included) is ``UNKNOW``, as RocketMQ treats a null answer."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            name = value.upper()
            if name == "UNKNOWN":
                return cls.UNKNOW
            if name in cls.__members__:
                return cls[name]
        return cls.UNKNOW

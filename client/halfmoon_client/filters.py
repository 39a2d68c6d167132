"""``FilterExpression``: which messages of a topic a consumer receives (RocketMQ 5
``org.apache.rocketmq.client.apis.consumer.FilterExpression``). The broker applies it: a
message it rejects is never delivered to the group and counts as consumed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FilterExpressionType(StrEnum):
    """RocketMQ's ``FilterExpressionType``: TAG (``TagA || TagB``, ``*``) or SQL92 over the
    message's properties (``a > 5 AND b = 'x'``; ``TAGS`` and ``KEYS`` name its tag and keys)."""

    TAG = "TAG"
    SQL92 = "SQL92"


@dataclass(frozen=True)
class FilterExpression:
    """A consumer's filter; the default, TAG ``*``, takes every message. A malformed SQL92
    expression is refused by the broker (``HalfmoonError`` 400 ``illegal_filter_expression``,
    ``details["position"]`` the 1-based character where it went wrong)."""

    expression: str = "*"
    type: FilterExpressionType = FilterExpressionType.TAG

    def to_json(self) -> dict[str, str]:
        """The receive's ``filter`` object: ``{"type", "expression"}``."""
        return {"type": FilterExpressionType(self.type).value, "expression": self.expression}


SUB_ALL = FilterExpression()
"""Every message of the topic (RocketMQ's ``FilterExpression.SUB_ALL``)."""

"""A consumer's filter expression (RocketMQ ``FilterExpression``): its type, TAG or SQL92, and its
text, checked once when it is read (``filter_expression_parse``). Pure: no database.

TAG (RocketMQ ``FilterAPI.buildSubscriptionData``): tags separated by ``||``, or ``*``/empty for
every message; a message matches when its one tag is in the set (``FilterUtils.isTagMatched``).
SQL92: a condition over the message's properties, parsed by ``broker.rules.sql92`` (RocketMQ
``SelectorParser``); a message matches when it evaluates to TRUE. The SQL that evaluates both
over the commit log is ``broker.selectors.filter_sql``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker.rules.sql92 import FilterExpressionError, Sql92, sql92_parse

__all__ = [
    "FilterExpression",
    "FilterExpressionError",
    "FilterType",
    "Sql92",
    "filter_expression_parse",
    "sql92_parse",
    "tag_set",
]

SUB_ALL = "*"  # RocketMQ SubscriptionData.SUB_ALL
TAG_SEPARATOR = "||"
_JAVA_TRIMMED = "".join(chr(code) for code in range(0x21))  # String.trim: every char <= ' '


class FilterType(enum.StrEnum):
    """RocketMQ ``ExpressionType``: the two filter languages."""

    TAG = "TAG"
    SQL92 = "SQL92"


@dataclass(frozen=True)
class FilterExpression:
    """A filter expression as given (``expression`` is not rewritten); built by
    ``filter_expression_parse``, which checks it."""

    type: FilterType
    expression: str

    @property
    def matches_all(self) -> bool:
        """True for a TAG expression that lets every message through (``tag_set`` is None)."""
        return self.type == FilterType.TAG and tag_set(self.expression) is None


def tag_set(expression: str) -> frozenset[str] | None:
    """The tags a TAG expression accepts, None when it accepts every message.

    RocketMQ ``FilterAPI.buildSubscriptionData``: an empty expression, or ``*``, is every message
    (here after Java's ``trim``, so ``" * "`` is ``*`` too; RocketMQ compares the untrimmed
    text, then keeps ``"*"`` as a literal tag); otherwise the expression is split on ``||``, each
    part trimmed, empty parts dropped: ``" A||B ||"`` -> ``{"A", "B"}``. A ``*`` beside other
    tags is a literal tag. When no part is left (``"||"``) the set is empty, and an empty tag set
    accepts every message, as RocketMQ's ``FilterUtils.isTagMatched`` and the client's
    ``PullAPIWrapper`` do (the broker's consume-queue filter, which compares tag hash codes,
    would let none through)."""
    whole = expression.strip(_JAVA_TRIMMED)
    if whole == SUB_ALL:
        return None
    tags = frozenset(
        tag for part in whole.split(TAG_SEPARATOR) if (tag := part.strip(_JAVA_TRIMMED))
    )
    return tags or None


def filter_expression_parse(type: str, expression: str) -> FilterExpression:
    """A consumer's filter expression, checked: ``type`` is ``"TAG"`` or ``"SQL92"`` exactly
    (RocketMQ ``FilterAPI.build`` compares with ``equals``). Any TAG expression is valid; a
    SQL92 one must parse (``sql92_parse``), and an empty one is refused (``FilterAPI.build``:
    "Expression can't be null"). Raises FilterExpressionError (position 0 for an unknown type)."""
    if type not in tuple(FilterType):
        raise FilterExpressionError(expression, 0, f"unknown filter type '{type}' (TAG or SQL92)")
    if type == FilterType.SQL92:
        sql92_parse(expression)
    return FilterExpression(FilterType(type), expression)

"""Consumer groups' subscriptions: the filter a group's consumers last received a topic with
(RocketMQ's ``ConsumerManager`` keeps each group's ``SubscriptionData`` from its clients'
heartbeats; the latest wins)."""

from __future__ import annotations

from django.db import connection

from broker.errors import InvalidInput
from broker.models import Subscription
from broker.rules.clock import now_ms
from broker.rules.filters import (
    FilterExpression,
    FilterExpressionError,
    FilterType,
    filter_expression_parse,
)

MATCH_ALL = FilterExpression(type=FilterType.TAG, expression="*")
"""The filter of a receive naming none (RocketMQ's default subscription, TAG ``*``)."""

SUBSCRIPTION_REFRESH_MS = 60_000
"""How long an unchanged subscription's ``updated_timestamp`` may lag: a receive writes its
group's subscription only when the filter differs or the row is older than this."""


def subscription_filter(*, type: str, expression: str) -> FilterExpression:
    """A consumer's filter (``type`` TAG or SQL92, ``expression``) checked
    (``filter_expression_parse``: RocketMQ ``FilterAPI.build``, ``SelectorParser``).

    Raises:
        InvalidInput: ``illegal_filter_expression`` (RocketMQ ILLEGAL_FILTER_EXPRESSION, 40010)
            with ``details`` ``type``, ``expression`` and ``position`` (1-based character).
    """
    try:
        return filter_expression_parse(type, expression)
    except FilterExpressionError as exc:
        raise InvalidInput(
            str(exc),
            code="illegal_filter_expression",
            details={"type": type, "expression": expression, "position": exc.position},
        ) from exc


def subscription_record(*, consumer_group: str, topic: str, expression: FilterExpression) -> None:
    """Record ``expression`` as ``consumer_group``'s subscription of ``topic`` (an upsert of
    ``Subscription``) in one statement that writes nothing when the row already holds it and
    is younger than ``SUBSCRIPTION_REFRESH_MS``: every receive calls it."""
    table = Subscription._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS s (consumer_group, topic, expression_type, expression, "
            "updated_timestamp) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (consumer_group, topic) "
            "DO UPDATE SET expression_type = EXCLUDED.expression_type, "
            "expression = EXCLUDED.expression, updated_timestamp = EXCLUDED.updated_timestamp "
            "WHERE s.expression_type <> EXCLUDED.expression_type "
            "OR s.expression <> EXCLUDED.expression "
            "OR s.updated_timestamp < EXCLUDED.updated_timestamp - %s",
            [
                consumer_group,
                topic,
                expression.type.value,
                expression.expression,
                now_ms(),
                SUBSCRIPTION_REFRESH_MS,
            ],
        )


def subscriptions_record(*, consumer_group: str, expressions: dict[str, FilterExpression]) -> None:
    """Record a gRPC client's subscriptions (its telemetry settings: topic -> filter), each as
    ``subscription_record`` does."""
    for topic, expression in expressions.items():
        subscription_record(consumer_group=consumer_group, topic=topic, expression=expression)

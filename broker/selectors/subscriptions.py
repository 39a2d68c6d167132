"""Consumer groups' subscriptions (``Subscription``: the filter each group last received a topic
with) and what they reject."""

from __future__ import annotations

from django.db import connection
from django.db.models import QuerySet

from broker.models import Message, Subscription
from broker.rules.filters import FilterExpression, FilterExpressionError, filter_expression_parse
from broker.selectors.filter_sql import filter_condition


def subscription_list(
    *, consumer_group: str | None = None, topic: str | None = None
) -> QuerySet[Subscription]:
    """The subscriptions of a consumer group, of a topic, or all, by group then topic."""
    rows = Subscription.objects.all()
    if consumer_group is not None:
        rows = rows.filter(consumer_group=consumer_group)
    if topic is not None:
        rows = rows.filter(topic=topic)
    return rows


def subscription_expression(subscription: Subscription) -> FilterExpression | None:
    """A stored subscription's filter, or None when it no longer parses (recorded by an
    earlier version of the grammar): such a subscription filters nothing out here."""
    try:
        return filter_expression_parse(subscription.expression_type, subscription.expression)
    except FilterExpressionError:
        return None


def groups_filtering_out(message: Message) -> set[str]:
    """The consumer groups whose subscription of ``message``'s topic rejects it (their
    filter evaluated by PostgreSQL on the stored message, as a receive evaluates it): one
    query per group with a filter other than ``*``."""
    out: set[str] = set()
    table = Message._meta.db_table
    for subscription in subscription_list(topic=message.topic):
        expression = subscription_expression(subscription)
        condition = filter_condition(expression) if expression is not None else None
        if condition is None:
            continue
        sql, params = condition
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT NOT ({sql}) FROM {table} m WHERE m.commit_log_offset = %(offset)s",
                {**params, "offset": message.pk},
            )
            row = cursor.fetchone()
        if row is not None and row[0]:
            out.add(subscription.consumer_group)
    return out

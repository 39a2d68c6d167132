"""Reads of the operator grants: which groups an actor may operate (``broker.rules.grants``).

``operator_scope`` is the one read every interface asks (the console's permission backend and
template filters, the API's access keys, the bulk previews through their callers)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.contrib.postgres.expressions import ArraySubquery
from django.contrib.postgres.fields import ArrayField
from django.db.models import BooleanField, CharField, F, Func, Q, QuerySet, Value
from django.db.models.functions import Cast

from broker.models import AuditTarget, OperatorGrant, Transaction
from broker.rules.grants import FULL_SCOPE, OperatorScope, operator_scope_of


def operator_scope(
    *, full: bool, user_id: int | None = None, access_key_id: int | None = None
) -> OperatorScope:
    """The groups an actor may operate: ``FULL_SCOPE`` (every group, no query) when ``full``
    (the caller decides: a console user with ``console.operate_console`` or a superuser, an
    admin access key), else the producer and consumer groups of its ``OperatorGrant`` rows
    (one indexed query; none: ``NO_SCOPE``, a viewer).

    Exactly one of ``user_id`` (a console user) and ``access_key_id`` (an access key) names the
    actor when not ``full``.

    Raises:
        ValueError: neither or both named (a programming error).
    """
    if full:
        return FULL_SCOPE
    return operator_scope_of(full=False, grants=_grants(user_id, access_key_id))


def operator_grants(
    *, user_id: int | None = None, access_key_id: int | None = None
) -> list[OperatorGrant]:
    """The grants of one console user or one access key, by kind then group name.

    Raises:
        ValueError: neither or both of ``user_id`` and ``access_key_id`` given.
    """
    return list(OperatorGrant.objects.filter(_holder(user_id, access_key_id)))


def _grants(user_id: int | None, access_key_id: int | None) -> list[tuple[str, str]]:
    return list(
        OperatorGrant.objects.filter(_holder(user_id, access_key_id)).values_list("kind", "group")
    )


def _holder(user_id: int | None, access_key_id: int | None) -> Q:
    if (user_id is None) == (access_key_id is None):
        raise ValueError("name exactly one holder: user_id or access_key_id")
    return Q(user_id=user_id) if user_id is not None else Q(access_key_id=access_key_id)


def operated_producer_groups(*, access_key_id: int) -> QuerySet[OperatorGrant, str]:
    """The names of the producer groups an access key operates by its grants, as a lazy query
    (to be used inside another: ``producer_group__in=operated_producer_groups(...)``)."""
    return OperatorGrant.objects.filter(
        access_key_id=access_key_id, kind=OperatorGrant.Kind.PRODUCER_GROUP
    ).values_list("group", flat=True)


class _InArray(Func):
    """``<column> = ANY(<array>)``, a condition for ``filter()``: PostgreSQL computes the array
    once and reads the rows through the column's index (an ``IN`` list ``OR`` an ``IN``
    subquery would have it scan the whole table)."""

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, tuple[Any, ...]]:
        column, array = self.source_expressions
        column_sql, column_params = compiler.compile(column)
        array_sql, array_params = compiler.compile(array)
        return f"{column_sql} = ANY({array_sql})", (*column_params, *array_params)


def producer_group_in_own_or_operated(
    groups: Collection[str], *, operated_by_access_key_id: int
) -> Func:
    """The condition ``producer_group = ANY(ARRAY[groups] || ARRAY(<the producer groups the
    access key operates>))``, for ``Transaction.objects.filter(...)``: the rows of ``groups``
    and of the groups the key operates, its grants read inside the same statement (no query of
    their own; the ``producer_group`` index still serves the filter)."""
    names = ArrayField(CharField(max_length=127))
    operated = ArraySubquery(operated_producer_groups(access_key_id=operated_by_access_key_id))
    listed = Cast(Value(sorted(set(groups))), output_field=names)
    array = Func(listed, operated, function="array_cat", output_field=names)
    return _InArray(F("producer_group"), array)


def bulk_target_producer_groups(bulk_id: int) -> frozenset[str]:
    """The producer groups of a bulk's frozen targets (an ``AuditEntry`` of a bulk action):
    whoever confirms it must operate all of them. A target whose transaction no longer exists
    adds nothing. One query (``DISTINCT`` over the targets joined with their transactions)."""
    ids = AuditTarget.objects.filter(entry_id=bulk_id).values("transaction_id")
    return frozenset(
        Transaction.objects.filter(pk__in=ids)
        .order_by()
        .values_list("producer_group", flat=True)
        .distinct()
    )

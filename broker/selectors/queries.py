"""Query helpers shared by the selectors."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

from broker.errors import NotFoundKind, not_found

_M = TypeVar("_M", bound=Model)


def first_or_not_found(queryset: QuerySet[_M], kind: NotFoundKind, name: str) -> _M:
    """The first row of ``queryset`` (at most one row: a lookup by a unique key).

    Raises:
        NotFound: ``<kind>_not_found`` naming ``name`` (``broker.errors.not_found``).
    """
    row = queryset.first()
    if row is None:
        raise not_found(kind, name)
    return row

"""Query helpers shared by the selectors."""

from __future__ import annotations

from typing import TypeVar

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.lookups import DataContains
from django.db.models import Model, Q, QuerySet, TextField, Value

from broker.errors import NotFoundKind, not_found
from broker.models import MULTI_KEYS, keys_array

_M = TypeVar("_M", bound=Model)


def key_match(key: str) -> Q:
    """``keys`` holds ``key`` as one of its space-separated keys: the one definition of a key
    search, for messages and transactions. Written so that for ``Message`` each arm has its
    partial index: a row of one key (``keys = key``: ``message_keys``) or one of several
    (``MULTI_KEYS`` and the array holds it: ``message_multi_keys``, GIN)."""
    holds = DataContains(keys_array(), Value([key], output_field=ArrayField(TextField())))
    return Q(keys=key) | (MULTI_KEYS & Q(holds))


def first_or_not_found(queryset: QuerySet[_M], kind: NotFoundKind, name: str) -> _M:
    """The first row of ``queryset`` (at most one row: a lookup by a unique key).

    Raises:
        NotFound: ``<kind>_not_found`` naming ``name`` (``broker.errors.not_found``).
    """
    row = queryset.first()
    if row is None:
        raise not_found(kind, name)
    return row

"""Building model instances from raw rows as the ORM builds the rows it reads."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


@functools.cache
def _field_defaults(model: type[models.Model]) -> tuple[tuple[str, Any], ...]:
    """``model``'s concrete fields in order, as (attribute name, the field's ``get_default``)."""
    return tuple((f.attname, f.get_default) for f in model._meta.concrete_fields)


@functools.cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    """``model``'s concrete fields' attribute names, in field order."""
    return tuple(f.attname for f in model._meta.concrete_fields)


def model_from_row(model: type[M], row: Sequence[Any]) -> M:
    """The instance of a row read by raw SQL holding every concrete column of ``model`` in
    field order (``SELECT t.*`` or the columns listed from ``_meta.concrete_fields``), built
    as the ORM builds a row it read (``Model.from_db``; no ``from_db_value`` conversions)."""
    return model.from_db(connection.alias, _attnames(model), row)


def model_new(model: type[M], **values: Any) -> M:
    """The unsaved instance ``model(**values)`` makes (a field not given gets its default),
    built as Django builds a row it read: one value per concrete field, in field order, at a
    fraction of the keyword path's cost (bench/README.md, "Building model instances"; a send
    builds two per half message). For models without relations; ``values`` are attribute names
    of concrete fields.

    Raises:
        TypeError: a value for something that is not a concrete field of ``model``.
    """
    args = [
        values.pop(name) if name in values else default()
        for name, default in _field_defaults(model)
    ]
    if values:
        raise TypeError(f"{model.__name__} has no concrete fields {', '.join(sorted(values))}")
    return model(*args)

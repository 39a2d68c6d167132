"""The SQL toolkit of the set-based statements: a cursor that binds parameters on the server
(so psycopg prepares a statement run often enough), and a CTE of rows handed over as one JSON
parameter. No broker rule lives here; ``broker.services.commitlog.storage`` and the services build their
statements with these."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper


def statement_cursor() -> CursorWrapper:
    """A cursor for the broker's set-based statements (``rows_cte``, ``messages_append_cte``:
    a send's, an end's, a batch's one statement). Its parameters are bound server-side, so
    psycopg prepares the statement on its connection once it has run
    ``HALFMOON_DB_PREPARE_THRESHOLD`` times there and PostgreSQL plans it once per connection,
    not per request (docs/operations.md "Prepared statements"). With the threshold 0,
    ``connection.cursor()``.

    The ORM's own queries keep Django's client-side binding: with server-side binding Django
    sends an int ``Value()`` as int4, which a ms timestamp overflows.

    Use as a context manager, like ``connection.cursor()``; it goes through Django's execute
    wrappers and query log, and its errors are Django's.
    """
    if not connection.settings_dict["OPTIONS"].get("prepare_threshold"):
        return connection.cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor  # psycopg 3 only

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        connection.validate_thread_sharing()
        cursor = ServerBindingCursor(connection.connection)
        if connection.queries_logged:
            return connection.make_debug_cursor(cursor)
        return connection.make_cursor(cursor)


@functools.cache
def _rows_definition(columns: tuple[tuple[str, str], ...]) -> str:
    """The column definition list of ``jsonb_to_recordset`` for ``columns`` (name, SQL type),
    quoted once per process: the statements are the same on every call."""
    return ", ".join(f"{connection.ops.quote_name(c)} {t}" for c, t in columns)


@functools.cache
def _bytea_columns(columns: tuple[tuple[str, str], ...]) -> tuple[tuple[int, str], ...]:
    """The (index, name) of ``columns``' ``bytea`` columns, whose values ``rows_cte`` sends in
    PostgreSQL's hex form."""
    return tuple((i, c) for i, (c, t) in enumerate(columns) if t == "bytea")


def rows_cte(
    name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
) -> tuple[str, list[Any]]:
    """A CTE ``name`` of ``rows`` handed over as ONE parameter, a JSON array of
    objects read back by ``jsonb_to_recordset`` with the columns' types, for a set-based
    statement.

    One parameter, however many rows: the statement's text is the same for one row or a batch,
    so psycopg parses it once per process (a ``VALUES`` list of one placeholder per cell was
    re-split on every call above psycopg's 4 KB cache limit, and each cell quoted apart), and
    the rows are encoded by ``json.dumps`` in C.

    Args:
        name: the CTE's name.
        columns: (column name, SQL type) in the rows' order.
        rows: each one Python value per column: None, bool, int, str (without NUL, which
            JSON in PostgreSQL cannot hold; the API refuses it), a dict or list (for a
            ``jsonb`` column), or bytes or a memoryview (for a ``bytea`` column, and only
            there: sent in PostgreSQL's hex form).

    Returns:
        (the CTE's SQL without ``WITH``, its one parameter).
    """
    names = [column for column, _ in columns]
    binary = _bytea_columns(tuple(columns))
    objects = []
    for row in rows:
        obj = dict(zip(names, row, strict=True))
        for index, column in binary:
            value = row[index]
            if value is not None:
                obj[column] = rf"\x{value.hex()}"
        objects.append(obj)
    definition = _rows_definition(tuple(columns))
    sql = f"{name} AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r({definition}))"
    return sql, [json.dumps(objects)]

"""The database made unreachable for real, within a block: the ``default`` connection replaced by
one to a closed port (connection refused) or to a server that accepts and never answers (the
connect timeout), then restored."""

from __future__ import annotations

import copy
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections


def closed_port() -> int:
    """A local port nothing listens on: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def silent_server() -> Iterator[int]:
    """A local port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@contextmanager
def database_at(
    port: int, *, pool_timeout: int | None = None, connect_timeout: int | None = None
) -> Iterator[None]:
    """Within the block, the ``default`` connection goes to 127.0.0.1:``port`` with the
    project's own options (``connect_timeout`` from settings unless given), through a pool of
    its own when ``pool_timeout`` is given; the real connection is restored after."""
    real = connections["default"]
    settings_dict = copy.deepcopy(real.settings_dict)
    settings_dict.update(HOST="127.0.0.1", PORT=str(port))
    options = settings_dict["OPTIONS"]
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    if pool_timeout is None:
        options.pop("pool", None)
    else:
        options["pool"] = {**options.get("pool", {}), "timeout": pool_timeout}
    # An alias of its own: the pools are kept per alias for the process.
    away = real.__class__(settings_dict, alias=f"away-{uuid.uuid4().hex[:8]}")
    connections["default"] = away
    try:
        yield
    finally:
        connections["default"] = real
        away.close()
        if pool_timeout is not None:
            away.close_pool()

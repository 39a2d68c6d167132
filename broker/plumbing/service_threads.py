"""The worker threads of an event-loop process (gRPC, remoting): Django's ORM is synchronous,
so every service and selector call of a protocol handler runs on a bounded pool of threads
(``HALFMOON_GRPC_THREADS``, ``HALFMOON_REMOTING_THREADS``), each call giving its database
connection back to the pool when it ends, as ``halfmoon.serving`` does for the web process's
views."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from broker.plumbing.polling import release_connection

T = TypeVar("T")


class Workers:
    """A pool of ``threads`` threads (named ``<name>_<n>``) running synchronous calls for an
    event loop."""

    def __init__(self, threads: int, name: str) -> None:
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)

    async def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in a pool thread, in a copy of the caller's context;
        the thread's database connection is released afterwards (kept by the pool, not
        closed). Its errors propagate."""
        call = functools.partial(_released, functools.partial(function, *args, **kwargs))
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, context.run, call)

    def shutdown(self) -> None:
        """Stop the pool after the calls running now (none are waited for)."""
        self.executor.shutdown(wait=False, cancel_futures=True)


def _released(function: Callable[[], T]) -> T:
    try:
        return function()
    finally:
        release_connection()

"""Group commit of the gRPC process: the half messages (and the ends) that arrive together, on
any of the process's connections, are stored in one database transaction by the batch services
(``broker.services.commitlog.batch``), as RocketMQ's broker groups the writes waiting for its commit log
(``CommitLog.GroupCommitService``).

A call waits for no timer: the first call finds a free lane and runs at once, alone; calls
arriving while every lane is busy queue, and a lane that frees takes every queued call (up to
``HALFMOON_BATCH_MAX_MESSAGES``) as its next batch. Under load the batches grow by themselves;
at rest each call is its own batch. An item is answered as the single operation answers it
(the batch services keep each item's outcome apart: a failing item undoes none of the others);
an error that is no item's own (the database gone) fails every call of its batch, and nothing
of that batch is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from broker.conf import conf
from broker.plumbing.service_threads import Workers
from broker.services.commitlog.batch import BatchItem

GROUP_COMMIT_LANES = 1
"""Batches of one kind (sends, or ends) in flight at once per process. One: two batches of a
kind would lock the same queues' offset counters and wait for each other's commit, and the
batches would be smaller (bench/grpc_throughput.py; figures in bench/README.md, "gRPC group
commit lanes")."""

Build = Callable[[], dict[str, Any]]
"""A call's item: run in the batch's worker thread, returns the keyword arguments of the
single operation's service (``transaction_prepare``, ``transaction_end``) or raises the
call's own error (authentication, permission, bad input)."""


class GroupCommit:
    """Calls of one kind grouped into batches of ``service`` (``transaction_prepare_batch``,
    ``transaction_end_batch``: a keyword argument ``keyword`` holding the items, one outcome
    per item, in order), run on ``workers``.

    Args:
        workers: the process's worker threads.
        service: the batch service.
        keyword: the name of its items' argument (``sends``, ``ends``).
        lanes: batches in flight at once (``GROUP_COMMIT_LANES``).
    """

    def __init__(
        self,
        workers: Workers,
        service: Callable[..., list[Any]],
        *,
        keyword: str,
        lanes: int = GROUP_COMMIT_LANES,
    ) -> None:
        self.workers = workers
        self.service = service
        self.keyword = keyword
        self.lanes = lanes
        self._waiting: list[tuple[Build, asyncio.Future[Any]]] = []
        self._busy = 0

    async def run(self, build: Build) -> Any:
        """The outcome of one call: ``build()`` then the service's work on its item, with the
        calls queued beside it.

        Returns:
            the item's outcome (what the single operation returns).

        Raises:
            the item's error (``build``'s, or the one the service answered for it), or the
            error that failed its whole batch.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((build, future))
        if self._busy < self.lanes:
            self._busy += 1
            asyncio.ensure_future(self._lane())
        return await future

    async def _lane(self) -> None:
        """Run batches of the queued calls until none waits, then free the lane."""
        try:
            while self._waiting:
                limit = conf.batch_max_messages
                batch, self._waiting = self._waiting[:limit], self._waiting[limit:]
                try:
                    outcomes = await self.workers.run(self._batch, [build for build, _ in batch])
                except BaseException as exc:  # no item's own: every call of the batch fails
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if future.done():  # the call was cancelled (its client gone)
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            self._busy -= 1

    def _batch(self, builds: Sequence[Build]) -> list[Any]:
        """In a worker thread: build each item (its error as its outcome), then run the
        service on the items when any is left."""
        items: list[BatchItem] = []
        for build in builds:
            try:
                items.append(build())
            except Exception as exc:
                items.append(exc)
        if all(isinstance(item, Exception) for item in items):
            return items
        return self.service(**{self.keyword: items})

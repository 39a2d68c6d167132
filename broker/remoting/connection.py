"""One TCP connection of a RocketMQ 4.x client: frames read and handed to a dispatcher, frames
written one at a time, and what the connection learnt of its client (its client id from
HEART_BEAT, the producer groups and topics it sent as)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

from broker.rules.remoting_frames import (
    FLAG_RESPONSE,
    FrameError,
    RemotingCommand,
    frame_decode,
    frame_encode,
    frame_length,
)

logger = logging.getLogger("halfmoon.remoting")


Dispatch = Callable[["Connection", RemotingCommand], Awaitable[None]]

_opaques = itertools.count(1)


class Connection:
    """A client's connection: ``peer`` ("ip:port"), ``client_id`` once its HEART_BEAT named it
    (before, ``provisional_id``), ``published`` (producer group, topic) pairs it sent half
    messages as, ``recorded``: the groups and topics last written to its ClientConnection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.client_id = ""
        self.producer_groups: set[str] = set()
        self.published: set[tuple[str, str]] = set()
        self.recorded: tuple[frozenset[str], frozenset[str]] | None = None
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def provisional_id(self) -> str:
        """The id half messages sent before the first HEART_BEAT are recorded with (the cpp
        client heartbeats right after its first send): no client row has it, so their checks
        go to a live client of the group publishing the topic."""
        return f"remoting@{self.peer}"

    @property
    def sender_id(self) -> str:
        """The client id a half message sent now is recorded with."""
        return self.client_id or self.provisional_id

    async def write(self, command: RemotingCommand) -> None:
        """Write one frame (frames of concurrent writers never interleave).

        Raises:
            ConnectionError: the connection is gone.
        """
        async with self._write_lock:
            self.writer.write(frame_encode(command))
            await self.writer.drain()

    def next_opaque(self) -> int:
        """A request id for a request the broker sends (CHECK_TRANSACTION_STATE)."""
        return next(_opaques)

    async def serve(self, dispatch: Dispatch) -> None:
        """Read frames until the client closes or sends an unreadable one; each request is
        dispatched in its own task (responses, which the broker never waits for, are skipped).
        Requests in flight when it closes still finish."""
        try:
            while True:
                length = frame_length(await self.reader.readexactly(4))
                command = frame_decode(await self.reader.readexactly(length))
                if command.flag & FLAG_RESPONSE:
                    continue
                task = asyncio.get_running_loop().create_task(dispatch(self, command))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except FrameError as exc:
            logger.warning("remoting connection %s closed: %s", self.peer, exc)
        finally:
            # Requests in flight finish (an END_TRANSACTION sent just before closing counts).
            self.writer.close()

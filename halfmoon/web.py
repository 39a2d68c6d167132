"""The web server process: ``python -m halfmoon.web [--host H] [--port P]``.

One uvicorn server (one event loop, ``halfmoon.serving``'s thread pool for the sync views)
serving ``halfmoon.asgi:application`` on a listening socket of its own, opened with
``SO_REUSEPORT``. Several such processes on one address (``WEB_CONCURRENCY`` of them:
``deploy/supervisord.conf`` ``numprocs``, the systemd template unit ``halfmoon-web@.service``)
each get their share of the connections from the kernel, which spreads new connections over
the sockets by their addresses and ports.

Why not ``uvicorn --workers N``: its workers accept from one shared socket, and asyncio accepts
every connection waiting at once, so the worker that wakes first takes a burst of connections
and keeps them for as long as the clients keep them alive. With producers keeping their
connections, the load splits unevenly and throughput is lower than with a socket per process
(figures in docs/operations.md, "Serving: what was measured"). A process that dies (and is
restarted by its supervisor alone) loses only its own connections; the others go on serving.
"""

from __future__ import annotations

import argparse
import os
import socket

import uvicorn

from halfmoon.heap import heap_freeze

APPLICATION = "halfmoon.asgi:application"


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` with ``SO_REUSEPORT`` (and ``SO_REUSEADDR``),
    listening: the kernel balances new connections between every such socket of
    the same user on that address. IPv6 when ``host`` is an IPv6 literal.

    Raises:
        OSError: the address cannot be bound (taken by a socket without ``SO_REUSEPORT``, or
            not local).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(backlog)
    return sock


def main(argv: list[str] | None = None) -> None:
    """Serve ``halfmoon.asgi`` on ``--host``/``--port`` (default ``HALFMOON_HOST`` and
    ``HALFMOON_PORT``, else 127.0.0.1:8000) until SIGTERM or SIGINT (uvicorn's graceful
    shutdown), the application loaded and its heap frozen first (``halfmoon.heap``). uvicorn
    logs at ``--log-level`` (default warning), without an access log;
    ``X-Forwarded-For`` is trusted from ``FORWARDED_ALLOW_IPS`` (uvicorn's default, loopback).
    """
    parser = argparse.ArgumentParser(prog="python -m halfmoon.web", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HALFMOON_HOST") or "127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("HALFMOON_PORT") or 8000))
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    sock = listening_socket(args.host, args.port)
    config = uvicorn.Config(APPLICATION, log_level=args.log_level, access_log=False)
    config.load()  # imports halfmoon.asgi: Django set up, the application built
    heap_freeze()
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()

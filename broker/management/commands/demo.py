"""``manage.py demo [--url URL] [--messages 10] [--timeout-s S]``: the RocketMQ transaction
example (TransactionProducer + TransactionListenerImpl + a consumer of TranTest) against a
running broker (web server, Celery worker and beat).

The example itself is the client package's ``halfmoon_client.examples.seed_demo``, which runs
over HTTP only. This command adds what needs the broker's code: it makes itself two access
keys in the database (an admin key for the topic and groups, an application key for the two
groups), computes a deadline from this environment's check settings, runs the example, and
deletes the keys afterwards. The outcome: 1, 4, 7 committed and consumed, 2, 5, 8 rolled back,
0, 3, 6, 9 discarded after ``HALFMOON_TRANSACTION_CHECK_MAX`` checks.

Start the broker with short check settings to see it end in seconds::

    HALFMOON_TRANSACTION_TIMEOUT_MS=1000 HALFMOON_TRANSACTION_CHECK_INTERVAL_MS=1000 \\
    HALFMOON_TRANSACTION_CHECK_MAX=3 ...

Exit status 0 only if the outcome is the example's.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from halfmoon_client.examples.seed_demo import (
    DemoFailed,
    SeedDemo,
    add_run_arguments,
    run_suffix,
)

from broker.conf import conf
from broker.models import AccessKey
from broker.services.admin import access_key_create


def default_timeout_s() -> float:
    """How long the UNKNOW transactions take to be discarded with this environment's settings:
    the first check after the transaction timeout, then one check per interval up to the check
    max, and the discard one interval later; plus a minute for scans and the consumer."""
    timeout = conf.transaction_timeout_ms
    interval = conf.transaction_check_interval_ms
    check_max = conf.transaction_check_max
    return (timeout + (check_max + 1) * interval) / 1000 + 60


class Command(BaseCommand):
    help = (
        "Run RocketMQ's transaction example (10 half messages to TranTest, a listener answering "
        "back-checks by value % 3, a consumer) against a running broker. Exit 0 only if 1, 4, 7 "
        "are committed and consumed, 2, 5, 8 rolled back and 0, 3, 6, 9 discarded."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_run_arguments(parser)
        parser.add_argument(
            "--timeout-s",
            type=float,
            default=None,
            help="give up (exit 1) if not every transaction is final and consumed by then; "
            "default: long enough for the check settings in this environment (the broker's "
            "must match): timeout + (check max + 1) x check interval + 60 s",
        )

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def handle(self, *args: Any, **options: Any) -> None:
        if options["messages"] < 1:
            raise CommandError("--messages must be at least 1.")
        suffix = run_suffix()
        producer_group = f"demo_producer_{suffix}"
        consumer_group = f"demo_consumer_{suffix}"
        key_names = [f"demo-admin-{suffix}", f"demo-app-{suffix}"]
        # The only database writes. Everything else goes over HTTP, through the client.
        _, admin_token = access_key_create(name=key_names[0], is_admin=True)
        _, app_token = access_key_create(
            name=key_names[1], producer_groups=[producer_group], consumer_groups=[consumer_group]
        )
        demo = SeedDemo(
            url=options["url"],
            admin_token=admin_token,
            token=app_token,
            producer_group=producer_group,
            consumer_group=consumer_group,
            count=options["messages"],
            timeout_s=options["timeout_s"] or default_timeout_s(),
            check_host=options["check_host"],
            say=self._say,
        )
        try:
            demo.run()
        except DemoFailed as exc:
            raise CommandError(str(exc)) from exc
        finally:
            # The tokens die with this run; so do their keys.
            AccessKey.objects.filter(name__in=key_names).delete()

"""How long ``manage.py rebuild_transactions`` takes at scale.

    .venv/bin/python bench/rebuild_cost.py [--transactions 100000]

Recreates the database named by ``DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/halfmoon_rebuild_bench``; it is DROPPED first), migrates,
seeds ``--transactions`` transactions in bulk as the services would leave them
(``bench/recovery_seed.py``), then times a dry run and a repairing run of
``broker.services.recovery.transactions_rebuild``. Both must find no difference. The last line:
``transactions=<n> rebuild_dry_s=<s> rebuild_s=<s>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def main() -> int:
    """Parse the options, recreate the database, seed, time both rebuilds; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=100_000)
    args = parser.parse_args()
    url = os.environ.setdefault(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/halfmoon_rebuild_bench"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
    import psycopg
    from throughput import database_recreate

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        database_recreate(conn, name)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from recovery_seed import seed

    from broker.services.recovery import transactions_rebuild
    from broker.services.topology.writes import producer_group_create, topic_create

    call_command("migrate", verbosity=0)
    topic_create(name="TranTest", queue_nums=4)
    producer_group_create(name="G", check_url=None)
    started = time.monotonic()
    seed(args.transactions)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"seeded {args.transactions} transactions in {time.monotonic() - started:.1f} s")

    started = time.monotonic()
    report = transactions_rebuild(dry_run=True)
    dry_s = time.monotonic() - started
    print(
        f"dry run: {dry_s:.2f} s, {report.half_messages} half and {report.op_messages} Op messages read"
    )
    started = time.monotonic()
    repaired = transactions_rebuild()
    apply_s = time.monotonic() - started
    print(f"repairing run: {apply_s:.2f} s")
    if report.differences or repaired.differences:
        print(f"unexpected differences: {(report.differences or repaired.differences)[:5]}")
        return 1
    print(f"transactions={args.transactions} rebuild_dry_s={dry_s:.2f} rebuild_s={apply_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

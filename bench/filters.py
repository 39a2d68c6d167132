"""What a consumer's filter costs per delivered message: a TAG filter and an SQL92 filter, each
matching 10% of a topic's messages, against a consumer of every message (``*``), same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_filter_bench \\
        .venv/bin/python bench/filters.py [--messages 200000] [--rounds 3] [--reuse]

1. Drops and recreates the database of ``DATABASE_URL`` (default ``halfmoon_filter_bench``),
   migrates it and fills the topic ``FilterBench`` (4 queues) server-side
   (``INSERT ... SELECT generate_series``) with ``--messages`` messages: message ``n`` has the
   tag ``Hot`` when ``n % 10 = 0`` (else ``Cold0``..``Cold8``) and the property ``a`` =
   ``n % 100``, so the TAG filter ``Hot`` and the SQL92 filter ``a >= 90`` each match 10%,
   not the same 10%; then ``VACUUM ANALYZE``. ``--reuse`` keeps a database this bench filled.
2. In this process (Django on that database), per round and in turn: a new consumer group per
   filter drains the topic through the broker's receive and ack
   (``broker.services.consumption.receive``: batches of 32, as a consumer would) until a
   receive answers nothing; the ``*`` group stops after as many messages as a filter
   delivers. The figure is wall time per delivered message, its median over ``--rounds``.

The last line is::

    star_us=<n> tag_us=<n> sql_us=<n> tag_ratio=<tag_us / star_us> sql_ratio=<sql_us / star_us>

Goal: both ratios <= 1.5 (the broker does not read and reject the other 90% one by one).
Figures: bench/README.md "Filters".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from message_search import prepare_database, server_check, topic_rows_insert

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_filter_bench"
TOPIC = "FilterBench"
QUEUES = 4
BATCH = 32
FILTERS = {"tag": ("TAG", "Hot"), "sql": ("SQL92", "a >= 90")}


def fill(conn: psycopg.Connection, messages: int) -> None:
    """The topic, its queues' counters and ``messages`` rows of ``broker_message``."""
    topic_rows_insert(conn, TOPIC, QUEUES, messages)
    conn.execute(
        "INSERT INTO broker_message (topic, queue_id, queue_offset, msg_id, tags, keys, body, "
        "body_is_text, properties, sys_flag, producer_group, born_timestamp, store_timestamp) "
        f"SELECT %s, n %% {QUEUES}, n / {QUEUES}, upper(md5(n::text)), "
        "CASE WHEN n %% 10 = 0 THEN 'Hot' ELSE 'Cold' || (n %% 9) END, 'ORDER-' || n, "
        "convert_to('order ' || n, 'UTF8'), true, jsonb_build_object('a', (n %% 100)::text), "
        "0, 'G', 1790000000000 + n, 1790000000000 + n FROM generate_series(0, %s) AS n",
        (TOPIC, messages - 1),
    )
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE broker_message")
    conn.autocommit = False


def drain(
    receive: Callable[[], list], ack: Callable[[list], None], limit: int
) -> tuple[int, float]:
    """Receive and ack until a receive answers nothing or ``limit`` came; (count, seconds)."""
    count = 0
    started = time.perf_counter()
    while count < limit and (batch := receive()):
        ack(batch)
        count += len(batch)
    return count, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep a filled database")
    args = parser.parse_args(argv)
    if args.messages < 1000 or args.messages % 100 or args.rounds < 1:
        parser.error("--messages >= 1000, a multiple of 100, and --rounds >= 1")
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    server_check(url)
    prepare_database(url, args.messages, args.reuse, fill)

    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "halfmoon.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from broker.services.consumption.receive import messages_ack, messages_receive
    from broker.services.consumption.subscriptions import MATCH_ALL, subscription_filter
    from broker.services.topology.writes import consumer_group_create

    def run(name: str, expression, limit: int) -> tuple[int, float]:
        consumer_group_create(name=name)
        return drain(
            lambda: messages_receive(
                consumer_group=name,
                topic=TOPIC,
                max_messages=BATCH,
                invisible_duration_ms=60_000,
                filter_expression=expression,
            ),
            lambda batch: messages_ack(
                consumer_group=name, receipt_handles=[r.receipt_handle for r in batch]
            ),
            limit,
        )

    stamp = int(time.time())
    per_message: dict[str, list[float]] = {"star": [], "tag": [], "sql": []}
    for round_ in range(args.rounds):
        delivered = {}
        for kind, (type_, text) in FILTERS.items():
            count, seconds = run(
                f"bench-{kind}-{stamp}-{round_}",
                subscription_filter(type=type_, expression=text),
                args.messages,
            )
            assert count == args.messages // 10, (kind, count)
            delivered[kind] = count
            per_message[kind].append(seconds / count * 1e6)
        count, seconds = run(f"bench-star-{stamp}-{round_}", MATCH_ALL, max(delivered.values()))
        per_message["star"].append(seconds / count * 1e6)
        print(
            f"round {round_ + 1}: "
            + " ".join(f"{k}_us={v[-1]:.1f}" for k, v in per_message.items()),
            flush=True,
        )
    star, tag, sql = (statistics.median(per_message[k]) for k in ("star", "tag", "sql"))
    print(
        f"star_us={star:.1f} tag_us={tag:.1f} sql_us={sql:.1f} "
        f"tag_ratio={tag / star:.3f} sql_ratio={sql / star:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

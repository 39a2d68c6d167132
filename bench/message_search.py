"""The message search at 10,000,000 messages: server time of a key search, a topic-and-hour
search and a msg-id look-up.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_search_bench \\
        .venv/bin/python bench/message_search.py [--messages 10000000] [--searches 200] [--reuse]

1. Drops and recreates the database of ``DATABASE_URL`` (default
   ``halfmoon_search_bench``), migrates it (``manage.py migrate``), then fills
   ``broker_message`` server-side (``INSERT ... SELECT generate_series``, in chunks, the
   indexes dropped during the load and built again after, as a restore would) with
   ``--messages`` messages over 7 days: 16 user topics of 4 queues plus the half and Op topics
   (every 9th a half message, every 10th an Op message), 80% with one key (``ORDER-<n>``),
   10% with two (``ORDER-<n> CUST-<m>``), the Op messages none, ten tags; then ``VACUUM
   ANALYZE``. ``--reuse`` keeps a database this bench filled before (same ``--messages``).
2. In this process (Django on that database), times each search as the console and the API run
   it, ``broker.selectors.message_search.message_search_page`` (first page, 50 messages):
   ``--searches`` key searches (a random existing key), topic-and-hour searches (a random user
   topic, a random hour) and msg-id look-ups (a random existing msg id), interleaved, after
   one untimed round. Server time is PostgreSQL's own: planning plus execution of the exact
   statements the selector sends (``EXPLAIN (ANALYZE)`` of each, captured with
   ``CaptureQueriesContext``), the archive note's statement included; the wall time of the
   whole selector call in this process is printed beside it.

The last line is::

    key_p95_ms=<n> range_p95_ms=<n> id_p95_ms=<n>

Goal: each under 50 ms. What the indexes cost the send path is measured with
``bench/throughput.py`` (bench/README.md, "Message search").
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from throughput import database_recreate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_search_bench"
DAYS_MS = 7 * 24 * 3600 * 1000
START_MS = 1_790_000_000_000  # 2026-09-21: a fixed week, so runs compare
USER_TOPICS = 16
QUEUES = 4
CHUNK = 1_000_000  # rows per INSERT ... SELECT (~40 s each on these machines with no index)


def admin_url(url: str) -> tuple[str, str]:
    """The server's ``postgres`` database URL and the bench database's name."""
    head, _, name = url.rpartition("/")
    return f"{head}/postgres", name or "halfmoon_search_bench"


def server_check(url: str) -> None:
    """Exit with a line saying how to start PostgreSQL when the server of ``url`` does not
    answer."""
    try:
        psycopg.connect(admin_url(url)[0]).close()
    except psycopg.OperationalError as exc:
        raise SystemExit(
            f"PostgreSQL does not answer at {url} ({exc}). Start it (e.g. pg_ctlcluster 15 main "
            "start) or set DATABASE_URL."
        ) from None


def topic_sql(n: str) -> str:
    """The topic of message ``n`` (SQL over the integer ``n``): 16 user topics, every 9th a half
    message and every 10th an Op message."""
    return (
        f"CASE WHEN {n} % 10 = 0 THEN 'RMQ_SYS_TRANS_OP_HALF_TOPIC' "
        f"WHEN {n} % 9 = 0 THEN 'RMQ_SYS_TRANS_HALF_TOPIC' "
        f"ELSE 'Topic' || ({n} % {USER_TOPICS}) END"
    )


def fill(conn: psycopg.Connection, messages: int) -> None:
    """Load ``messages`` rows into ``broker_message`` with its indexes dropped, then build them
    again from their definitions (pg_indexes), ``ANALYZE``."""
    table = "broker_message"
    indexes = conn.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %s AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
        (table,),
    ).fetchall()
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    step = DAYS_MS / messages
    for low in range(1, messages + 1, CHUNK):
        high = min(messages, low + CHUNK - 1)
        started = time.monotonic()
        topic = topic_sql("n")
        conn.execute(
            f"INSERT INTO {table} (commit_log_offset, topic, queue_id, queue_offset, msg_id, "
            "tags, keys, body, body_is_text, properties, sys_flag, producer_group, "
            "born_timestamp, store_timestamp, prepared_transaction_offset) "
            f"SELECT n, {topic}, (n / 20) % {QUEUES}, n, "
            "upper(md5(n::text)), 'Tag' || (n % 10), "
            "CASE WHEN n % 10 = 0 THEN '' WHEN n % 10 = 1 "
            "THEN 'ORDER-' || n || ' CUST-' || (n % 100000) ELSE 'ORDER-' || n END, "
            "'\\x7b7d'::bytea, true, '{}'::jsonb, 0, 'G', "
            f"{START_MS} + (n * {step})::bigint - 5, {START_MS} + (n * {step})::bigint, NULL "
            f"FROM generate_series({low}, {high}) AS n"
        )
        conn.commit()
        print(f"  rows {low:,}-{high:,} in {time.monotonic() - started:.1f} s", flush=True)
    conn.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', 'commit_log_offset'), {messages})"
    )
    for name, definition in indexes:
        started = time.monotonic()
        conn.execute(definition)
        conn.commit()
        print(f"  index {name} in {time.monotonic() - started:.1f} s", flush=True)
    conn.autocommit = True
    conn.execute(f"VACUUM ANALYZE {table}")
    conn.autocommit = False


def topic_rows_insert(conn: psycopg.Connection, topic: str, queues: int, messages: int) -> None:
    """The rows of a user topic of ``queues`` queues whose counters stand after ``messages``
    messages spread round-robin (message ``n`` on queue ``n % queues``), for a bench's fill."""
    conn.execute(
        "INSERT INTO broker_topic (name, queue_nums, system, created_timestamp) "
        "VALUES (%s, %s, false, 0)",
        (topic, queues),
    )
    conn.execute(
        "INSERT INTO broker_consumequeue (topic, queue_id, max_offset) "
        "SELECT %s, q, (%s - q + %s - 1) / %s FROM generate_series(0, %s) AS q",
        (topic, messages, queues, queues, queues - 1),
    )


def prepare_database(
    url: str,
    messages: int,
    reuse: bool,
    fill: Callable[[psycopg.Connection, int], None] = fill,
) -> None:
    """Create, migrate and fill the bench database with ``fill(conn, messages)`` (this bench's
    own by default; bench/filters.py passes its own), unless ``reuse`` finds it filled."""
    server, name = admin_url(url)
    with psycopg.connect(server, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if reuse and exists:
        with psycopg.connect(url) as conn:
            have = conn.execute("SELECT count(*) FROM broker_message").fetchone()[0]
        if have == messages:
            print(f"reusing {name}: {have:,} messages")
            return
    with psycopg.connect(server, autocommit=True) as conn:
        database_recreate(conn, name)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "halfmoon.settings"}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    print(f"filling {name} with {messages:,} messages", flush=True)
    started = time.monotonic()
    with psycopg.connect(url) as conn:
        fill(conn, messages)
    print(f"filled in {time.monotonic() - started:.0f} s", flush=True)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--searches", type=int, default=200, help="of each kind")
    parser.add_argument("--reuse", action="store_true", help="keep a filled database")
    args = parser.parse_args(argv)
    if args.messages < 1000 or args.searches < 20:
        parser.error("--messages >= 1000 and --searches >= 20")
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    server_check(url)
    prepare_database(url, args.messages, args.reuse)

    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "halfmoon.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from broker.selectors.message_search import MessageQuery, message_search_page

    rng = random.Random(25)
    step = DAYS_MS / args.messages

    def key_query() -> MessageQuery:
        n = rng.randrange(1, args.messages + 1)
        while n % 10 == 0:  # Op messages have no key
            n = rng.randrange(1, args.messages + 1)
        return MessageQuery(key=f"ORDER-{n}")

    def range_query() -> MessageQuery:
        hour = rng.randrange(0, 7 * 24)
        start = START_MS + hour * 3_600_000
        return MessageQuery(
            topic=f"Topic{rng.randrange(USER_TOPICS)}", start_ms=start, end_ms=start + 3_600_000
        )

    def id_query() -> MessageQuery:
        n = rng.randrange(1, args.messages + 1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT upper(md5(%s::text))", [str(n)])
            return MessageQuery(msg_id=cursor.fetchone()[0])

    kinds = {"key": key_query, "range": range_query, "id": id_query}
    server: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    found: dict[str, int] = dict.fromkeys(kinds, 0)
    for round_ in range(args.searches + 1):
        for kind, make in kinds.items():
            query = make()
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                page = message_search_page(query)
                elapsed = (time.perf_counter() - started) * 1000
            spent = 0.0
            with connection.cursor() as cursor:
                for statement in captured.captured_queries:
                    cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement['sql']}")
                    plan = cursor.fetchone()[0][0]
                    spent += plan["Planning Time"] + plan["Execution Time"]
            if round_ == 0:
                continue  # untimed: warms the caches and the connection
            server[kind].append(spent)
            wall[kind].append(elapsed)
            found[kind] += len(page.messages)
    print(f"{args.messages:,} messages, {args.searches} searches of each kind (step {step:.1f} ms)")
    for kind in kinds:
        print(
            f"{kind:>5}: server p50 {statistics.median(server[kind]):.2f} ms, "
            f"p95 {p95(server[kind]):.2f} ms, max {max(server[kind]):.2f} ms; "
            f"selector call p50 {statistics.median(wall[kind]):.2f} ms, "
            f"p95 {p95(wall[kind]):.2f} ms; {found[kind] / args.searches:.1f} messages a search"
        )
    print(
        f"key_p95_ms={p95(server['key']):.2f} range_p95_ms={p95(server['range']):.2f} "
        f"id_p95_ms={p95(server['id']):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Delay and timer messages: how late the timer delivers them, whether it loses or doubles
any, and what a million scheduled messages cost a send.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/halfmoon_timer_bench \\
        REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/timers.py \\
        [--messages 100000] [--spread-s 10] [--scheduled 1000000] [--rate-sends 5000]

1. Drops, recreates and migrates the database of ``DATABASE_URL`` (default
   ``halfmoon_timer_bench``); topic ``TimerBench`` with 4 queues.
2. Send rate, in this process through the broker's send (``message_send_at``, one message per
   call as a producer sends them): ``--rate-sends`` messages due in two days, with nothing
   scheduled; then ``--scheduled`` more are loaded server-side (``INSERT ... SELECT
   generate_series``, due over the next three days, on ``RMQ_SYS_WHEEL_TIMER`` with their
   index rows, as the send stores them) and the send rate is measured again.
   ``send_ratio`` = the rate with them over the rate without.
3. Lateness: ``python -m halfmoon.timer`` runs (as ``bin/run`` runs it); ``--messages``
   messages are sent, due evenly over ``--spread-s`` seconds starting after the last send.
   A watcher reads every 10 ms which have been delivered (their index rows, in the order the
   timer committed them); a message's lateness is when the watcher saw it delivered less its
   due time (so it includes the commit and up to 10 ms of the watcher's period). ``lost``: not
   delivered 30 s after the last due time; ``doubled``: copies on the topic beyond one per
   message.

The last line is::

    late_p50_ms=<n> late_p99_ms=<n> lost=<n> doubled=<n> send_ratio=<n>

Goals (issue 38): ``late_p99_ms < 200``, ``send_ratio >= 0.9``, nothing lost or doubled.
Figures: bench/README.md "Timers".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from message_search import prepare_database, server_check, topic_rows_insert

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_timer_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
TOPIC = "TimerBench"
QUEUES = 4
DAY_MS = 86_400_000
WATCH_S = 0.01


def fill(conn: psycopg.Connection, messages: int) -> None:
    """The topic and its queues' counters (nothing scheduled yet)."""
    topic_rows_insert(conn, TOPIC, QUEUES, 0)
    conn.commit()


def load_scheduled(url: str, count: int, now: int, timer_topic: str) -> None:
    """``count`` scheduled messages due over the three days after tomorrow, stored as the send
    stores them: on ``timer_topic`` queue 0 at the next offsets, with their index rows."""
    with psycopg.connect(url) as conn:
        (base,) = conn.execute(
            "SELECT max_offset FROM broker_consumequeue WHERE topic = %s AND queue_id = 0 "
            "FOR UPDATE",
            (timer_topic,),
        ).fetchone()
        conn.execute(
            "INSERT INTO broker_message (topic, queue_id, queue_offset, msg_id, tags, keys, "
            "body, body_is_text, properties, sys_flag, producer_group, born_timestamp, "
            "store_timestamp) SELECT %(t)s, 0, %(base)s::bigint + n, 'SEED' || n, '', 'ORDER-' || n, "
            "convert_to('cancel order ' || n, 'UTF8'), true, jsonb_build_object("
            "'REAL_TOPIC', %(topic)s::text, 'REAL_QID', (n %% 4)::text, 'UNIQ_KEY', 'SEED' || n, "
            "'TIMER_DELIVER_MS', (%(due)s::bigint + n * 3)::text), 0, '', %(now)s, %(now)s "
            "FROM generate_series(0, %(last)s) AS n",
            {
                "t": timer_topic,
                "base": base,
                "topic": TOPIC,
                "due": now + DAY_MS,
                "now": now,
                "last": count - 1,
            },
        )
        conn.execute(
            "INSERT INTO broker_scheduledmessage (commit_log_offset, msg_id, topic, queue_id, "
            "tags, keys, producer_group, delivery_timestamp, state, scheduled_timestamp, "
            "recalled_by, recall_reason) SELECT commit_log_offset, msg_id, %s, "
            "(properties->>'REAL_QID')::int, '', keys, '', "
            "(properties->>'TIMER_DELIVER_MS')::bigint, 'SCHEDULED', store_timestamp, '', '' "
            "FROM broker_message WHERE topic = %s AND queue_id = 0 AND queue_offset >= %s",
            (TOPIC, timer_topic, base),
        )
        conn.execute(
            "UPDATE broker_consumequeue SET max_offset = max_offset + %s "
            "WHERE topic = %s AND queue_id = 0",
            (count, timer_topic),
        )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE broker_message")
        conn.execute("VACUUM ANALYZE broker_scheduledmessage")


class Watcher(threading.Thread):
    """Records, every ``WATCH_S``, when each newly delivered message was first seen (ms)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: dict[str, int] = {}  # msg_id -> seen ms
        self.due: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        last = 0
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT delivered_commit_log_offset, msg_id, delivery_timestamp "
                    "FROM broker_scheduledmessage WHERE state = 'DELIVERED' AND topic = %s "
                    "AND delivered_commit_log_offset > %s ORDER BY delivered_commit_log_offset",
                    (TOPIC, last),
                ).fetchall()
                now = time.time_ns() // 1_000_000
                for offset, msg_id, due in rows:
                    self.seen.setdefault(msg_id, now)
                    self.due[msg_id] = due
                    last = max(last, offset)
                self.stop.wait(WATCH_S)


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--spread-s", type=float, default=10.0)
    parser.add_argument("--scheduled", type=int, default=1_000_000)
    parser.add_argument("--rate-sends", type=int, default=5000)
    args = parser.parse_args(argv)
    if args.messages < 100 or args.scheduled < 1 or args.rate_sends < 100:
        parser.error("--messages >= 100, --scheduled >= 1, --rate-sends >= 100")
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    server_check(url)
    prepare_database(url, 0, False, fill)

    os.environ.update(
        DATABASE_URL=url, REDIS_URL=redis_url, DJANGO_SETTINGS_MODULE="halfmoon.settings"
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from broker.constants import TIMER_TOPIC
    from broker.rules.clock import now_ms
    from broker.services.timers.schedule import message_send_at

    def send(count: int, due_of) -> float:
        """Send ``count`` messages, message ``i`` due at ``due_of(i)``; the rate (per s)."""
        started = time.perf_counter()
        for i in range(count):
            message_send_at(
                delivery_timestamp=due_of(i), topic=TOPIC, body=b"cancel order", keys=f"K{i}"
            )
        return count / (time.perf_counter() - started)

    later = now_ms() + 2 * DAY_MS
    rate_empty = send(args.rate_sends, lambda i: later + i)
    print(f"send rate, nothing scheduled: {rate_empty:.0f}/s", flush=True)
    started = time.perf_counter()
    load_scheduled(url, args.scheduled, now_ms(), TIMER_TOPIC)
    print(f"loaded {args.scheduled:,} scheduled in {time.perf_counter() - started:.0f} s")
    rate_full = send(args.rate_sends, lambda i: later + i)
    print(f"send rate, {args.scheduled:,} scheduled: {rate_full:.0f}/s", flush=True)

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    timer = subprocess.Popen([sys.executable, "-m", "halfmoon.timer"], cwd=ROOT, env=env)
    watcher = Watcher(url)
    try:
        # Due times start once every send is done (at the rate just measured, with margin).
        first_due = now_ms() + int(args.messages / rate_full * 1500) + 3000
        step = args.spread_s * 1000 / args.messages
        send(args.messages, lambda i: first_due + int(i * step))
        if now_ms() >= first_due:
            raise SystemExit("the sends overran the first due time: run with fewer --messages")
        watcher.start()
        last_due = first_due + int(args.spread_s * 1000)
        deadline = time.monotonic() + (last_due - now_ms()) / 1000 + 30
        while len(watcher.seen) < args.messages and time.monotonic() < deadline:
            time.sleep(0.2)
        watcher.stop.set()
        watcher.join()
    finally:
        timer.terminate()
        timer.wait(30)
    late = [watcher.seen[m] - watcher.due[m] for m in watcher.seen]
    with psycopg.connect(url) as conn:
        copies, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT msg_id) FROM broker_message WHERE topic = %s",
            (TOPIC,),
        ).fetchone()
    lost = args.messages - distinct
    print(
        f"delivered {distinct:,} of {args.messages:,}; late ms: min {min(late, default=0)}, "
        f"mean {statistics.fmean(late) if late else 0:.1f}, max {max(late, default=0)}"
    )
    print(
        f"late_p50_ms={percentile(late, 0.5):.0f} late_p99_ms={percentile(late, 0.99):.0f} "
        f"lost={lost} doubled={copies - distinct} send_ratio={rate_full / rate_empty:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

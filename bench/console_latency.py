"""How fast the operators' console shows a change, in a real browser, and how long its stuck
list takes to render with 100,000 pending transactions.

    .venv/bin/python bench/console_latency.py [--changes 200] [--pending 5000]

Seeds ``bench_console`` (``DATABASE_URL``) with ``--pending`` PREPARED transactions
(``history_seed``), serves the broker (2 web processes, Redis flushed first), and in Debian's
Chromium (Playwright) times ``--changes`` ends of a listed transaction until its row changes;
then seeds ``<name>_100k`` with ``--list-pending`` and times the stuck list's view in process.
The last two lines::

    list_ms_100k=<n>
    p50_ms=<n> p95_ms=<n>

Goals: p95 < 300 ms, list < 200 ms (server time). Steps and figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from typing import Any

import redis
from history_seed import GROUP, history_seed
from op_ratio import percentile
from throughput import (
    CHILDREN,
    LOG_DIR,
    ROOT,
    Pg,
    _exit_on_signal,
    base_env,
    pick_port,
    run,
    start_web,
    wait_http,
)

sys.path.insert(0, str(ROOT))
from tests.e2e.processes import (  # noqa: E402 - the repository root is on the path only now
    CHROMIUM,
    CHROMIUM_MISSING,
    chromium_launch,
    console_sign_in,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/bench_console"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
OPERATOR, PASSWORD = "bench-operator", "bench-operator-password"
CLOSED_CHECK_URL = "http://127.0.0.1:9/check"  # the seeded group's producer never answers
LIST_PATH = "/console/transactions/"
CHANGE_TIMEOUT_MS = 5000
WARMUP_CHANGES = 10

# One change, run inside the page: end ``id`` through the API with fetch() and time, in the
# page's clock, the API answer, live.js's event for it and the row's change in the DOM.
MEASURE_JS = """
async ({id, group, action, token, timeoutMs}) => {
  const selector = `tr[data-transaction-id="${id}"]`;
  const reflected = () => {
    const row = document.querySelector(selector);
    // Gone, marked as leaving (it fades out before it is removed) or in another state.
    return !row || row.classList.contains("leaving") || !row.classList.contains("state-prepared");
  };
  return await new Promise((resolve) => {
    const out = {};
    const t0 = performance.now();
    let timer = null;
    const onEvent = (event) => {
      if (event.detail && event.detail.transaction_id === id && out.event_ms === undefined) {
        out.event_ms = performance.now() - t0;
      }
    };
    const observer = new MutationObserver(() => {
      if (out.dom_ms === undefined && reflected()) {
        out.dom_ms = performance.now() - t0;
        finish();
      }
    });
    const finish = () => {
      if (out.dom_ms === undefined && timer !== null) return;
      if (out.api_ms === undefined) return;
      observer.disconnect();
      clearTimeout(timer);
      document.removeEventListener("halfmoon:transaction", onEvent);
      resolve(out);
    };
    document.addEventListener("halfmoon:transaction", onEvent);
    observer.observe(document.body, {subtree: true, childList: true, attributes: true,
                                     characterData: true});
    timer = setTimeout(() => { timer = null; out.timeout = true; finish(); }, timeoutMs);
    fetch(`/api/v1/transactions/${id}/end`, {
      method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": `Bearer ${token}`},
      body: JSON.stringify({producer_group: group, action: action}),
    }).then((answer) => {
      out.status = answer.status;
      out.api_ms = performance.now() - t0;
      finish();
    });
  });
}
"""

# The PREPARED transactions the list shows now, in page order.
VISIBLE_JS = """
() => Array.from(document.querySelectorAll("tr[data-transaction-id]"))
  .filter((row) => row.classList.contains("state-prepared") && !row.classList.contains("leaving"))
  .map((row) => row.dataset.transactionId)
"""


def database_prepare(pg: Pg, dbname: str, pending: int, env: dict[str, str]) -> None:
    """Recreate and migrate ``dbname``, seed ``pending`` PREPARED transactions (SQL) and make
    the console operator ``OPERATOR``."""
    pg.recreate(dbname)
    manage = [sys.executable, str(ROOT / "manage.py")]
    t0 = time.monotonic()
    run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
    print(f"{dbname}: recreated and migrated in {time.monotonic() - t0:.1f} s", flush=True)
    history_seed(pg, dbname, history=0, pending=pending, half_queues=4, check_url=CLOSED_CHECK_URL)
    run(
        [*manage, "create_console_user", OPERATOR, "--role", "operator", "--password", PASSWORD],
        env=env,
    )


def page_live(page: Any) -> None:
    """Wait until live.js's websocket is connected."""
    page.wait_for_selector('#live-status[data-state="live"]', state="attached", timeout=15000)


def list_open(page: Any, url: str) -> float:
    """Load the stuck list and wait for its websocket; returns the load time (ms)."""
    t0 = time.monotonic()
    page.goto(url + LIST_PATH)
    page.wait_for_selector("tr[data-transaction-id]", state="attached")
    elapsed = (time.monotonic() - t0) * 1000
    page_live(page)
    return elapsed


def measure_changes(args: argparse.Namespace, url: str, token: str) -> dict[str, list[Any]]:
    """Sign in, then time ``args.changes`` ends (after ``WARMUP_CHANGES`` untimed ones).

    Returns ``{"api": [...], "event": [...], "dom": [...]}`` in ms (a change whose row did not
    change within ``CHANGE_TIMEOUT_MS`` counts as that long) and ``"missed"``: those changes'
    transaction ids."""
    from playwright.sync_api import sync_playwright

    figures: dict[str, list[Any]] = {"api": [], "event": [], "dom": [], "missed": []}
    with sync_playwright() as playwright:
        browser = chromium_launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            console_sign_in(page, url, OPERATOR, PASSWORD)
            load_ms = list_open(page, url)
            print(f"browser: list page with {args.pending} pending loaded in {load_ms:.0f} ms")
            for i in range(WARMUP_CHANGES + args.changes):
                visible = page.evaluate(VISIBLE_JS)
                if not visible:
                    list_open(page, url)  # the page ran out of rows: fetch the next ones
                    visible = page.evaluate(VISIBLE_JS)
                action = "commit" if i % 2 == 0 else "rollback"
                out = page.evaluate(
                    MEASURE_JS,
                    {
                        "id": visible[0],
                        "group": GROUP,
                        "action": action,
                        "token": token,
                        "timeoutMs": CHANGE_TIMEOUT_MS,
                    },
                )
                if out.get("status") != 200:
                    raise RuntimeError(f"end of {visible[0]} answered {out.get('status')}")
                if i < WARMUP_CHANGES:
                    continue
                figures["api"].append(out["api_ms"])
                if "event_ms" in out:
                    figures["event"].append(out["event_ms"])
                if out.get("timeout"):  # counted at the timeout: the percentiles stay honest
                    figures["missed"].append(visible[0])
                    figures["dom"].append(CHANGE_TIMEOUT_MS)
                    page.reload()  # start the next change from a page that shows the truth
                    page_live(page)
                else:
                    figures["dom"].append(out["dom_ms"])
        finally:
            browser.close()
    return figures


def list_worker(requests: int) -> int:
    """In this process: time the Django view of the stuck list (``--list-worker``)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=OPERATOR))
    for path in (LIST_PATH, f"{LIST_PATH}?min_checks=1", f"{LIST_PATH}?group={GROUP}"):
        times = []
        for i in range(requests + 1):
            t0 = time.perf_counter()
            answer = client.get(path)
            elapsed = (time.perf_counter() - t0) * 1000
            if answer.status_code != 200:
                raise SystemExit(f"GET {path} answered {answer.status_code}")
            if i:  # the first request warms caches and connections
                times.append(elapsed)
        print(f"list {path} median_ms={statistics.median(times):.1f} max_ms={max(times):.1f}")
    return 0


def measure_list(pg: Pg, args: argparse.Namespace) -> float:
    """Seed ``<name>_100k`` and time the list view there; returns the median (ms) of the
    unfiltered list."""
    dbname = f"{pg.dbname}_100k"
    env = base_env(pg.url_for(dbname), "halfmoon.settings")
    env["REDIS_URL"] = args.redis_url
    database_prepare(pg, dbname, args.list_pending, env)
    out = run(
        [sys.executable, __file__, "--list-worker", "--requests", str(args.requests)], env=env
    )
    print(out.strip())
    first = out.strip().splitlines()[0]
    return float(first.split("median_ms=")[1].split()[0])


def main(argv: list[str] | None = None) -> int:
    """Run both measurements; print the figures and, last, the two result lines."""
    parser = argparse.ArgumentParser(
        description="Console latency in Chromium (API change -> DOM) with --pending pending, "
        "and the stuck list's server time with --list-pending pending. DATABASE_URL names the "
        "server and the database (<name> and <name>_100k: DROPPED and recreated).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--changes", type=int, default=200, help="timed changes")
    parser.add_argument("--pending", type=int, default=5000, help="PREPARED during the changes")
    parser.add_argument("--list-pending", type=int, default=100_000, help="PREPARED for the list")
    parser.add_argument("--requests", type=int, default=21, help="timed list requests")
    parser.add_argument("--port", type=int, help="web port (default: first free of 18200-18249)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="flushed first")
    parser.add_argument("--list-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list_worker:
        return list_worker(args.requests)
    if not CHROMIUM.exists():
        print(CHROMIUM_MISSING, file=sys.stderr)
        return 2

    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    pg = Pg.parse(os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    with redis.Redis.from_url(args.redis_url) as r:
        r.flushdb()
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    env.update(REDIS_URL=args.redis_url, HALFMOON_VAR_DIR=str(LOG_DIR / "console-var"))
    database_prepare(pg, pg.dbname, args.pending, env)
    manage = [sys.executable, str(ROOT / "manage.py")]
    run([*manage, "collectstatic", "--noinput", "-v", "0"], env=env)
    token = run([*manage, "create_access_key", "bench-console", "--admin"], env=env).split()[-1]

    port = pick_port(args.port)
    log = LOG_DIR / "console-uvicorn.log"
    server = start_web(env, port, log)
    try:
        wait_http(port, "/healthz", server, log)
        figures = measure_changes(args, f"http://127.0.0.1:{port}", token)
    finally:
        CHILDREN.stop(server)
    list_ms = measure_list(pg, args)

    p50, p95 = percentile(figures["dom"], 0.50), percentile(figures["dom"], 0.95)
    event_p50 = percentile(figures["event"], 0.50)
    for name in ("api", "event", "dom"):
        values = figures[name]
        print(
            f"{name}: n={len(values)} p50_ms={percentile(values, 0.5):.1f} "
            f"p95_ms={percentile(values, 0.95):.1f} max_ms={max(values, default=0):.1f}"
        )
    print(f"missed (no DOM change within {CHANGE_TIMEOUT_MS} ms): {len(figures['missed'])}")
    print(
        f"baseline: websocket event p50 {event_p50:.1f} ms; DOM / event p50 ratio "
        f"{p50 / event_p50 if event_p50 else float('nan'):.2f}"
    )
    print(f"list_ms_100k={list_ms:.0f}")
    print(f"p50_ms={p50:.0f} p95_ms={p95:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

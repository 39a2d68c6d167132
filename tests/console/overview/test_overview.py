"""The overview's figures (``broker.selectors.overview``) over transactions seeded through the
services at chosen times, and its page and JSON (``/console/``, ``/console/overview.json``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from broker.models import ProducerGroup, Transaction, TransactionEvent
from broker.selectors.overview import BUCKET_MS, WINDOW_BUCKETS, OverviewWindow, overview
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end, transaction_get_locked
from broker.services.transactions.resolution import transaction_discard
from console.views.overview import overview_json
from tests.support import prepare

MIN = BUCKET_MS
NOW = 1_800_000_030_000  # 30 s into a minute
WINDOW = OverviewWindow.ending_at(NOW)
START = WINDOW.start
CHECK_MAX = 5


def at(minute: float) -> int:
    """The time ``minute`` minutes after the window's start (ms; negative: before it)."""
    return START + int(minute * MIN)


def seeded(
    group: str,
    *,
    born: int,
    end: str | None = None,
    resolved: int | None = None,
    check_times: int = 0,
) -> Transaction:
    """A transaction of ``group`` made by the services (prepared, then ended by its producer
    or discarded by the scan's service), then moved to the chosen times."""
    tx = prepare(producer_group=group)
    if end in ("commit", "rollback"):
        transaction_end(transaction_id=tx.pk, producer_group=group, action=end)
    elif end == "discard":
        with transaction.atomic():
            transaction_discard(transaction_get_locked(tx.pk), reason="check_max")
        TransactionEvent.objects.filter(transaction_id=tx.pk, kind="discarded").update(
            timestamp=resolved
        )
    Transaction.objects.filter(pk=tx.pk).update(
        born_timestamp=born,
        resolved_timestamp=resolved if end else None,
        check_times=check_times,
    )
    tx.refresh_from_db()
    return tx


@pytest.fixture
def seed(db, topic) -> dict[str, Any]:
    """Two producer groups, G and H, with transactions born and ended at chosen minutes of the
    window (see each line), and some groups unreachable or backing off."""
    for name in ("G", "H"):
        producer_group_create(name=name, check_url=None)
    txs = {
        # Born before the window and still pending, checked 3 times.
        "p_old": seeded("G", born=at(-10), check_times=3),
        # Born before the window, committed in minute 10.
        "c1": seeded("G", born=at(-5), end="commit", resolved=at(10.5)),
        # Born in minute 20, committed in minute 25.
        "c2": seeded("G", born=at(20.1), end="commit", resolved=at(25.2)),
        # Born and rolled back in minute 40.
        "r1": seeded("G", born=at(40.1), end="rollback", resolved=at(40.9)),
        # Born in minute 5, discarded in minute 50.
        "d1": seeded("G", born=at(5.5), end="discard", resolved=at(50.5), check_times=5),
        # Pending in H, born in minutes 30 and 55.
        "p_mid": seeded("H", born=at(30.5), check_times=1),
        "p_new": seeded("H", born=at(55.5)),
        # Ended an hour before the window: in none of its figures.
        "gone": seeded("G", born=at(-120), end="commit", resolved=at(-61)),
    }
    # H: 20 commits born at minute 45, resolved 1..20 s later.
    txs["h"] = [
        seeded("H", born=at(45), end="commit", resolved=at(45) + k * 1000) for k in range(1, 21)
    ]
    ProducerGroup.objects.filter(name="G").update(
        unreachable_since=NOW - 120_000, last_check_error="connection refused", check_failures=3
    )
    producer_group_create(name="K", check_url="http://127.0.0.1:9/k")
    ProducerGroup.objects.filter(name="K").update(
        check_backoff_until=NOW + 10_000, check_failures=2
    )
    producer_group_create(name="L", check_url="http://127.0.0.1:9/l")
    ProducerGroup.objects.filter(name="L").update(check_backoff_until=NOW - 10_000)
    return txs


def pending_at(t: int) -> int:
    """Pending at instant ``t`` by the definition, over every row (the selector reads fewer)."""
    return sum(
        1
        for born, resolved in Transaction.objects.values_list(
            "born_timestamp", "resolved_timestamp"
        )
        if born < t and (resolved is None or resolved >= t)
    )


def test_window_is_the_last_sixty_whole_minutes():
    assert WINDOW.end == 1_800_000_060_000
    assert WINDOW.end - WINDOW.start == WINDOW_BUCKETS * MIN
    assert WINDOW.minutes[0] == START and WINDOW.minutes[-1] == WINDOW.end - MIN
    assert WINDOW.minutes[-1] <= NOW < WINDOW.end


def test_pending_over_time_follows_births_and_ends(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    series = data.pending_over_time
    assert len(series) == WINDOW_BUCKETS
    ends = [min(START + (i + 1) * MIN, NOW) for i in range(WINDOW_BUCKETS)]
    assert series == [pending_at(t) for t in ends]
    # By hand: p_old and c1 before the window; +d1 at 5, -c1 at 10, +c2 20, -c2 25,
    # +p_mid 30, r1 in and out at 40, the 20 of H in and out at 45, -d1 50, +p_new 55.
    assert series[0] == 2
    assert series[4:6] == [2, 3]
    assert series[9:11] == [3, 2]
    assert series[20] == 3 and series[25] == 2
    assert series[30] == 3 and series[40] == 3 and series[45] == 3
    assert series[50] == 2 and series[55] == 3
    assert series[-1] == data.pending_now == 3


def test_commits_rollbacks_and_discards_per_minute(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    expected_commits = [0] * WINDOW_BUCKETS
    expected_commits[10] = expected_commits[25] = 1
    expected_commits[45] = 20
    assert data.commits == expected_commits
    assert data.rollbacks == [1 if i == 40 else 0 for i in range(WINDOW_BUCKETS)]
    assert data.discards == [1 if i == 50 else 0 for i in range(WINDOW_BUCKETS)]
    assert data.discarded_now == 1
    assert data.minutes == WINDOW.minutes


def test_check_histogram_counts_pending_by_check_times(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    # p_old 3 checks, p_mid 1, p_new 0; d1 (5 checks) is DISCARDED, not pending.
    assert data.check_max == CHECK_MAX
    assert data.check_histogram == [1, 1, 0, 1, 0, 0]
    Transaction.objects.filter(pk=seed["p_new"].pk).update(check_times=CHECK_MAX + 2)
    assert overview(now=NOW, check_max=CHECK_MAX).check_histogram == [0, 1, 0, 1, 0, 1]


def test_latency_percentiles_per_group_by_nearest_rank(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    by_group = {row.producer_group: row for row in data.latency}
    assert set(by_group) == {"G", "H"}
    h = by_group["H"]
    assert (h.count, h.p50_ms, h.p95_ms, h.p99_ms) == (20, 10_000, 19_000, 20_000)
    g_latencies = sorted(
        tx.resolved_timestamp - tx.born_timestamp for tx in (seed["c1"], seed["c2"], seed["r1"])
    )
    g = by_group["G"]
    assert g.count == 3  # "gone" ended before the window; d1 is a discard, not a resolution
    assert (g.p50_ms, g.p95_ms, g.p99_ms) == (g_latencies[1], g_latencies[2], g_latencies[2])


def test_unreachable_groups_and_oldest_pending_per_group(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    assert [(g.name, g.pending, g.check_failures) for g in data.unreachable] == [
        ("G", 1, 3),  # unreachable for 2 min, first
        ("K", 0, 2),  # backing off, no pending
    ]  # L's backoff is over
    assert data.unreachable[0].last_check_error == "connection refused"
    assert data.unreachable[1].check_backoff_until == NOW + 10_000
    oldest = [
        (r.producer_group, r.transaction_id, r.pending, r.age_ms) for r in data.oldest_pending
    ]
    assert oldest == [
        ("G", seed["p_old"].pk, 1, NOW - at(-10)),
        ("H", seed["p_mid"].pk, 2, NOW - at(30.5)),
    ]
    assert data.oldest_pending_age_ms == NOW - at(-10)


def test_json_carries_the_figures_links_and_texts(seed):
    data = overview(now=NOW, check_max=CHECK_MAX)
    out = overview_json(data)
    assert out["pending_now"] == 3 and out["discarded_now"] == 1
    assert out["pending_over_time"] == data.pending_over_time
    assert out["oldest_pending_age_ms"] == NOW - at(-10)
    assert out["oldest_pending_age_ms_text"] == "1 h 9 min"  # 69.5 min
    first = out["oldest_pending"][0]
    assert first["url"] == reverse("console:transaction", args=[seed["p_old"].pk])
    assert first["age_ms_text"] == "1 h 9 min"
    h = next(row for row in out["latency"] if row["producer_group"] == "H")
    assert (h["p50_ms_text"], h["p99_ms_text"]) == ("10 s", "20 s")
    assert out["unreachable"][0]["unreachable_since_text"] == "2 min ago"


def _queries(**kwargs: Any) -> int:
    with CaptureQueriesContext(connection) as ctx:
        overview(**kwargs)
    return len(ctx.captured_queries)


def test_query_count_does_not_grow_with_groups(seed):
    before = _queries(now=NOW, check_max=CHECK_MAX)
    for i in range(8):
        name = f"More{i}"
        producer_group_create(name=name, check_url=None)
        seeded(name, born=at(1 + i))
        seeded(name, born=at(2 + i), end="rollback", resolved=at(3 + i))
        ProducerGroup.objects.filter(name=name).update(unreachable_since=NOW - 1000)
    data = overview(now=NOW, check_max=CHECK_MAX)
    assert len(data.oldest_pending) == 10 and len(data.latency) == 10
    assert _queries(now=NOW, check_max=CHECK_MAX) == before == 9


def test_page_and_json_for_a_viewer(seed, console_client):
    viewer = console_client("viewer")
    page = viewer.get(reverse("console:overview"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="chart-pending"' in html and "console/overview.js" in html
    assert reverse("console:transaction", args=[seed["p_old"].pk]) in html
    answer = viewer.get(reverse("console:overview_data"))
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/json"
    body = answer.json()
    # The clock is the real one here: the seeded times are far in the future or past.
    assert body["pending_now"] == 3
    assert len(body["pending_over_time"]) == WINDOW_BUCKETS
    assert {row["producer_group"] for row in body["oldest_pending"]} == {"G", "H"}


@pytest.mark.parametrize("route", ["console:overview", "console:overview_data"])
def test_anonymous_signs_in_and_no_role_is_refused(db, client, console_client, route):
    anonymous = client.get(reverse(route))
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("console:login"))
    assert console_client(None).get(reverse(route)).status_code == 403

"""A producer group whose checks time out, or whose producers stop polling, is down from its
first failed round (``unanswered_since``, ``broker.rules.checks.group_down_since``): the
``group_unreachable`` alert, ``/metrics`` and the console's overview read that one rule."""

from __future__ import annotations

import time

from broker.models import ProducerGroup
from broker.selectors.overview import overview
from broker.selectors.reachability import producer_group_reachability
from broker.services.alerts.rules import alert_rule_create
from broker.services.topology.writes import producer_group_create
from tests.services.alerts.conftest import announced, tick
from tests.services.test_metrics import scrape
from tests.support import check_server_running, due_at, prepare, round_for


def _slow(body: object) -> tuple[int, dict]:
    time.sleep(0.5)
    return 200, {"state": "UNKNOW"}


def test_checks_that_time_out_make_the_group_down_from_the_first_round(
    topic, hook, broker_settings
):
    broker_settings["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 100
    alert_rule_create(name="g-down", kind="group_unreachable", threshold=60)
    with check_server_running(answer=_slow) as endpoint:
        producer_group_create(name="G", check_url=endpoint.url)
        tx = prepare()
        first = due_at(tx)
        outcome = round_for(tx, first)["outcomes"][0]
        assert outcome.delivered and outcome.timed_out

        group = ProducerGroup.objects.get()
        assert (group.unanswered_since, group.unreachable_since) == (first, None)
        assert not producer_group_reachability()[0].reachable
        assert scrape()[("halfmoon_producer_group_reachable", (("producer_group", "G"),))] == 0
        assert [g.name for g in overview(now=first + 1).unreachable] == ["G"]

        tx.refresh_from_db()
        later = first + 35_000
        round_for(tx, later)  # a second round, timed out too: still down since the first
        assert ProducerGroup.objects.get().unanswered_since == first
        tick(first + 59_000)
        assert announced(hook) == []
        tick(first + 60_000)
        assert announced(hook) == [("firing", "g-down", "G")]

        endpoint.answer = lambda body: (200, {"state": "UNKNOW"})
        tx.refresh_from_db()
        round_for(tx, later + 35_000)  # answered in time

    group = ProducerGroup.objects.get()
    assert (group.unanswered_since, group.check_failures, group.check_backoff_until) == (
        None,
        0,
        None,
    )
    assert scrape()[("halfmoon_producer_group_reachable", (("producer_group", "G"),))] == 1
    tick(later + 36_000)
    assert announced(hook) == [("firing", "g-down", "G"), ("resolved", "g-down", "G")]


def test_a_polling_group_nobody_polls_is_down(topic, hook):
    alert_rule_create(name="g-down", kind="group_unreachable", threshold=0)
    producer_group_create(name="G", check_url=None)
    tx = prepare()
    first = due_at(tx)
    round_for(tx, first)  # a check request queued
    tx.refresh_from_db()
    round_for(tx, tx.next_check_timestamp)  # still not taken a whole interval later
    group = ProducerGroup.objects.get()
    assert group.unreachable_since is not None

    tick(group.unreachable_since + 1000)

    assert announced(hook) == [("firing", "g-down", "G")]
    assert "no producer polled" in hook.received()[0].body["alerts"][0]["annotations"]["summary"]

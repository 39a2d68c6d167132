"""Two workers at once (each thread has its own database connection): two evaluations make one
alert and queue one notification; two delivery passes send each notification once (the claim
skips what the other holds, and a claimed notification is not due again until its lease
ends)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from broker.models import Alert, AlertNotification
from broker.services.alerts import alerts_evaluate, notifications_deliver
from broker.services.alerts.receivers import receiver_create
from broker.services.alerts.rules import alert_rule_create
from broker.services.topology.writes import producer_group_create, topic_create
from tests.support import check_server_running, prepare


def _together(*jobs: Callable[[], Any]) -> list[Any]:
    """Run ``jobs`` in threads released at the same moment; their results, in order."""
    start = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int, job: Callable[[], Any]) -> None:
        try:
            start.wait(10)
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_two_evaluations_at_once_make_one_alert_and_one_notification():
    topic_create(name="TranTest", queue_nums=4)
    producer_group_create(name="G", check_url=None)
    alert_rule_create(name="stuck", kind="oldest_pending", threshold=0)
    receiver_create(name="hook", kind="alertmanager", url="http://127.0.0.1:9/hook")
    tx = prepare()
    now = tx.born_timestamp + 1000

    reports = _together(lambda: alerts_evaluate(now=now), lambda: alerts_evaluate(now=now))

    assert sorted(r.started for r in reports) == [0, 1]
    assert Alert.objects.count() == 1
    assert AlertNotification.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_delivery_passes_at_once_send_each_notification_once():
    topic_create(name="TranTest", queue_nums=4)
    for group in "ABCDE":
        producer_group_create(name=group, check_url=None)
    alert_rule_create(name="stuck", kind="oldest_pending", threshold=0)

    def slow(body: object) -> tuple[int, dict]:
        time.sleep(0.3)
        return 200, {}

    with check_server_running(answer=slow) as server:
        receiver_create(name="hook", kind="alertmanager", url=server.url)
        born = max(prepare(producer_group=g).born_timestamp for g in "ABCDE")
        alerts_evaluate(now=born + 1000)
        assert AlertNotification.objects.count() == 5

        reports = _together(notifications_deliver, notifications_deliver)

    assert sum(r.sent for r in reports) == 5
    received = [r.body["alerts"][0]["labels"]["producer_group"] for r in server.received()]
    assert sorted(received) == list("ABCDE")
    assert set(AlertNotification.objects.values_list("state", "attempts")) == {("sent", 1)}

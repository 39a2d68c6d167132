"""Shared fixtures. Tests run against real PostgreSQL and Redis (see README, "Tests").

People, so permission tests read as sentences: ``owner`` (admin key), ``producer`` (producer
group G), ``consumer`` (consumer group C) and ``outsider`` (a key with no rights).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from broker.models import ConsumerGroup, ProducerGroup, Topic
from broker.services.topology.writes import (
    access_key_create,
    consumer_group_create,
    producer_group_create,
    topic_create,
)

RULES_DIR = Path(__file__).resolve().parent / "rules"


LONGEST_FIRST = (
    "tests.bench.test_bench_smoke",
    "tests.e2e.test_spark_cluster",
    "tests.e2e.test_chaos_bench",
    "tests.e2e.test_failover",
    "tests.e2e.test_backup_restore",
    "tests.e2e.test_scan_workers",
    "tests.e2e.test_demo_reconcile",
    "tests.e2e.test_rocketmq_clients",
    "tests.e2e.test_service_faults",
)
"""The e2e modules that take longest (CI's ``--durations``, 2026-12-02: 100-300 s each), started
first; the other e2e modules follow in collection order. Only the order depends on it."""


def _schedule_rank(item: pytest.Item) -> tuple[int, int]:
    """(0, 0) for a test of the session's Spark, (1, its place in ``LONGEST_FIRST``) for an e2e
    test, (2, 0) for any other."""
    if item.get_closest_marker("e2e"):
        module = item.module.__name__
        return 1, LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)
    return (0, 0) if "spark" in getattr(item, "fixturenames", ()) else (2, 0)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of the pure rules (``tests/rules/``, ``broker.rules``) are marked ``unit``: they need
    no database, no Redis and no network, so ``bin/test -m unit`` runs them in seconds.

    Under pytest-xdist (bin/test: ``--dist loadgroup --no-loadscope-reorder``) the tests using
    the session's Spark (group ``spark``) share one worker, so one Spark JVM starts, and each
    e2e file is a group of its own (its module-scoped stack, its fixed Redis database). The
    groups run first, longest first (Spark, then the e2e files, ``LONGEST_FIRST`` at their
    head), and the other tests fill the workers after them, so no long group starts last.
    """
    groups = bool(getattr(config.option, "loadgroup", False))  # a worker of --dist loadgroup
    for item in items:
        if RULES_DIR in Path(item.fspath).parents:
            item.add_marker(pytest.mark.unit)
        kind = _schedule_rank(item)[0] if groups else 2
        if kind == 0:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif kind == 1:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if groups:
        items.sort(key=_schedule_rank)


@pytest.fixture(autouse=True)
def _lookups_forgotten() -> None:
    """Each test starts with an empty lookup cache (``broker.lookups``): the database of the
    test before was rolled back, so what it cached (a topic, a consumer group) no longer
    exists."""
    from broker.lookups import lookups_forget_all

    lookups_forget_all()


@pytest.fixture(scope="session")
def spark():
    """The test run's one Spark session on ``local[2]`` (HALFMOON_SPARK_MASTER of
    halfmoon.settings_test), started on first use (~6 s) and stopped at the end."""
    from broker.pipeline.spark import spark_session, spark_stop

    session = spark_session(
        master=settings.HALFMOON_SPARK_MASTER, driver_memory=settings.HALFMOON_SPARK_DRIVER_MEMORY
    )
    yield session
    spark_stop()


def client_for(token: str | None) -> APIClient:
    """An API client sending ``Authorization: Bearer <token>`` (none when token is None)."""
    client = APIClient()
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def anonymous() -> APIClient:
    return client_for(None)


@pytest.fixture
def owner(db) -> APIClient:
    _, token = access_key_create(name="owner", is_admin=True)
    return client_for(token)


@pytest.fixture
def producer(db) -> APIClient:
    _, token = access_key_create(name="producer", producer_groups=["G"])
    return client_for(token)


@pytest.fixture
def consumer(db) -> APIClient:
    _, token = access_key_create(name="consumer", consumer_groups=["C"])
    return client_for(token)


@pytest.fixture
def outsider(db) -> APIClient:
    _, token = access_key_create(name="outsider")
    return client_for(token)


@pytest.fixture
def topic(db) -> Topic:
    return topic_create(name="TranTest", queue_nums=4)


@pytest.fixture
def producer_group(db) -> ProducerGroup:
    """Producer group G; its producers poll for checks (no check_url)."""
    return producer_group_create(name="G", check_url=None)


@pytest.fixture
def consumer_group(db) -> ConsumerGroup:
    return consumer_group_create(name="C", max_delivery_attempts=3)


@pytest.fixture
def broker_settings(settings) -> dict[str, int]:
    """A private copy of ``settings.HALFMOON_SETTINGS`` to change in a test, e.g.
    ``broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3``."""
    settings.HALFMOON_SETTINGS = dict(settings.HALFMOON_SETTINGS)
    return settings.HALFMOON_SETTINGS

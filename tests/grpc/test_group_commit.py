"""Group commit (``broker.grpc.group_commit``): calls arriving together are stored by one batch,
each answered as the single operation answers it; an item's error stays its own; an error of
the whole batch fails only that batch's calls, and the next calls are served."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker.errors import Forbidden, NotFound
from broker.grpc.group_commit import GroupCommit
from broker.models import Message, Transaction
from broker.plumbing.service_threads import Workers
from broker.services.commitlog.batch import transaction_end_batch, transaction_prepare_batch
from broker.services.topology.writes import producer_group_create, topic_create

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = 24


@pytest.fixture
def workers() -> Iterator[Workers]:
    pool = Workers(4, "grpc")
    yield pool
    pool.shutdown()


@pytest.fixture
def orders() -> None:
    topic_create(name="orders", queue_nums=4)
    producer_group_create(name="shop", check_url=None)


def recording(service: Callable[..., list[Any]], sizes: list[int]) -> Callable[..., list[Any]]:
    """``service``, noting the size of each batch it is given."""

    def run(**kwargs: Any) -> list[Any]:
        (items,) = kwargs.values()
        sizes.append(len(items))
        return service(**kwargs)

    return run


def half(n: int, topic: str = "orders") -> Callable[[], dict[str, Any]]:
    return lambda: {
        "producer_group": "shop",
        "topic": topic,
        "body": f"order {n}".encode(),
        "keys": f"ORDER-{n}",
    }


async def gather(commit: GroupCommit, builds: list[Callable[[], dict[str, Any]]]) -> list[Any]:
    return await asyncio.gather(*(commit.run(b) for b in builds), return_exceptions=True)


def test_calls_arriving_together_share_batches_and_each_gets_its_own_transaction(workers, orders):
    sizes: list[int] = []
    commit = GroupCommit(
        workers, recording(transaction_prepare_batch, sizes), keyword="sends", lanes=1
    )

    outcomes = asyncio.run(gather(commit, [half(n) for n in range(CALLS)]))

    assert all(created for _, created in outcomes)
    ids = [tx.transaction_id for tx, _ in outcomes]
    assert len(set(ids)) == CALLS
    stored = Transaction.objects.in_bulk(ids)
    assert [stored[i].keys for i in ids] == [f"ORDER-{n}" for n in range(CALLS)]
    assert sum(sizes) == CALLS and len(sizes) < CALLS


def test_an_items_error_is_its_own_and_the_others_are_stored(workers, orders):
    def refused() -> dict[str, Any]:
        raise Forbidden("This access key may not act for producer group other.")

    commit = GroupCommit(workers, transaction_prepare_batch, keyword="sends", lanes=1)
    builds = [half(0), refused, half(2, topic="missing"), half(3)]

    outcomes = asyncio.run(gather(commit, builds))

    assert isinstance(outcomes[1], Forbidden)
    assert isinstance(outcomes[2], NotFound) and outcomes[2].code == "topic_not_found"
    stored = {tx.transaction_id for tx, _ in (outcomes[0], outcomes[3])}
    assert set(Transaction.objects.values_list("transaction_id", flat=True)) == stored


def test_ends_arriving_together_commit_once_each(workers, orders):
    sends = GroupCommit(workers, transaction_prepare_batch, keyword="sends")
    sizes: list[int] = []
    ends = GroupCommit(workers, recording(transaction_end_batch, sizes), keyword="ends", lanes=1)

    async def scenario() -> list[Any]:
        sent = await gather(sends, [half(n) for n in range(CALLS)])
        ids = [tx.transaction_id for tx, _ in sent]
        # Each transaction committed twice at once (a client's retry): both answered.
        return await gather(
            ends,
            [
                (lambda i=i: {"transaction_id": i, "producer_group": "shop", "action": "commit"})
                for i in ids + ids
            ],
        )

    outcomes = asyncio.run(scenario())

    assert all(isinstance(o, Transaction) and o.state == "COMMITTED" for o in outcomes)
    assert Message.objects.filter(topic="orders").count() == CALLS
    assert sum(sizes) == 2 * CALLS and len(sizes) < 2 * CALLS


def test_an_error_of_the_whole_batch_fails_its_calls_only(workers, orders):
    failing = {"on": True}

    def flaky(**kwargs: Any) -> list[Any]:
        if failing["on"]:
            raise ConnectionError("the database is gone")
        return transaction_prepare_batch(**kwargs)

    commit = GroupCommit(workers, flaky, keyword="sends", lanes=1)

    first = asyncio.run(gather(commit, [half(n) for n in range(4)]))
    failing["on"] = False
    second = asyncio.run(gather(commit, [half(n) for n in range(4)]))

    assert all(isinstance(o, ConnectionError) for o in first)
    assert all(created for _, created in second)
    assert Transaction.objects.count() == 4


def test_a_caller_gone_leaves_the_lane_serving(workers, orders):
    commit = GroupCommit(workers, transaction_prepare_batch, keyword="sends", lanes=1)

    async def scenario() -> Any:
        gone = asyncio.ensure_future(commit.run(half(0)))
        await asyncio.sleep(0)
        gone.cancel()
        return await commit.run(half(1))

    tx, created = asyncio.run(scenario())

    assert created and Transaction.objects.filter(pk=tx.pk).exists()

"""Step 3 of a round, ``check_outcomes_apply`` (broker/services/checks/outcomes.py): answers
applied through ``transaction_end``, undelivered checks retried with backoff and uncounted,
producer groups backed off when none of their checks is answered, a dead group beside a
healthy one."""

from __future__ import annotations

import threading
from collections import Counter

from broker.models import ProducerGroup, Resolution, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.services import checks
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from tests.services.checks.helpers import (
    INTERVAL,
    by_group,
    delivered_copies,
    group_row,
    journal,
    prepare_many,
    refreshed,
    url_group,
)
from tests.support import (
    answer_state,
    closed_port_url,
    due_at,
    prepare,
    round_at,
    round_for,
)


def test_commit_answer_commits_once_resolved_by_check(topic, http_group, check_server):
    check_server.answer = answer_state("COMMIT_MESSAGE")
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)

    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("COMMITTED", "check", 1)
    [delivered] = delivered_copies(tx)
    assert delivered.queue_offset == tx.queue_offset
    resolution = Resolution.objects.get(transaction=tx)
    assert (resolution.action, resolution.resolved_by) == ("COMMIT", "check")

    # Later rounds send nothing and deliver nothing again.
    round_for(tx, due + INTERVAL)
    round_for(tx, due + 10 * INTERVAL)
    assert len(check_server.received()) == 1
    assert len(delivered_copies(tx)) == 1


def test_rollback_answer_rolls_back(topic, http_group, check_server):
    check_server.answer = answer_state("ROLLBACK_MESSAGE")
    tx = prepare()
    round_for(tx, due_at(tx))

    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("ROLLED_BACK", "check", 1)
    assert delivered_copies(tx) == []
    assert Resolution.objects.get(transaction=tx).action == "ROLLBACK"


def test_202_leaves_it_prepared_until_end_from_transaction_check(
    topic, http_group, check_server, producer
):
    check_server.answer = lambda check: (202, b"")
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)

    tx = refreshed(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)

    response = producer.post(
        f"/api/v1/transactions/{tx.transaction_id}/end",
        {"producer_group": "G", "action": "commit", "from_transaction_check": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "COMMITTED"
    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by) == ("COMMITTED", "check")
    assert len(delivered_copies(tx)) == 1

    detail = producer.get(f"/api/v1/transactions/{tx.transaction_id}").json()
    assert (detail["state"], detail["resolved_by"], detail["check_times"]) == (
        "COMMITTED",
        "check",
        1,
    )

    round_for(tx, due + INTERVAL)
    assert len(check_server.received()) == 1


def test_never_a_check_after_the_producer_resolved(topic, http_group, check_server):
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)
    assert len(check_server.received()) == 1

    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="rollback")
    for k in range(1, 6):
        assert round_for(tx, due + k * INTERVAL)["due"] == 0
    assert len(check_server.received()) == 1
    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("ROLLED_BACK", "producer", 1)


def test_a_commit_answer_after_a_producer_rollback_is_not_applied(topic, http_group, check_server):
    """The producer rolls back while a check is in flight whose answer is COMMIT."""
    tx = prepare()

    def commit_after_rollback(check):
        return 200, {"state": "COMMIT_MESSAGE"}

    check_server.answer = commit_after_rollback
    jobs, _ = checks.check_claim(half_queue_id=tx.half_queue_id, now=due_at(tx))
    outcomes = checks.checks_send(jobs)
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="rollback")
    checks.check_outcomes_apply(outcomes, now=due_at(tx))

    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by) == ("ROLLED_BACK", "producer")
    assert delivered_copies(tx) == []
    assert Resolution.objects.filter(transaction=tx).count() == 1


def test_undelivered_checks_back_off_uncounted_and_mark_the_group_unreachable(
    topic, db, check_server, broker_settings
):
    broker_settings["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 1000
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 8000
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    group = producer_group_create(name="G", check_url=closed_port_url())
    check_server.secrets["G"] = group.check_secret
    tx = prepare()
    now = due_at(tx)
    first_failure = now

    backoffs = []
    for _ in range(6):
        result = round_for(tx, now)
        [outcome] = result["outcomes"]
        assert outcome.delivered is False
        tx = refreshed(tx)
        assert tx.state == "PREPARED"  # never discarded for checks it could not send
        assert tx.check_times == 0
        backoffs.append(tx.next_check_timestamp - now)
        # Not due again before the backoff ends.
        assert round_for(tx, tx.next_check_timestamp - 1)["due"] == 0
        now = tx.next_check_timestamp
    assert backoffs == [1000, 2000, 4000, 8000, 8000, 8000]
    assert tx.undelivered_checks == 6

    group.refresh_from_db()
    assert group.unreachable_since == first_failure
    assert group.last_check_error
    assert (
        TransactionEvent.objects.filter(transaction_id=tx.pk, kind="check_undelivered").count() == 6
    )
    assert TransactionEvent.objects.filter(transaction_id=tx.pk, kind="check_sent").count() == 0

    # The producer comes back (the URL changes without resetting the group's state by hand).
    ProducerGroup.objects.filter(name="G").update(check_url=check_server.url)
    round_for(tx, now)
    [request] = check_server.received()
    assert request.body["check_times"] == 1
    assert request.signature_valid is True
    tx = refreshed(tx)
    assert (tx.check_times, tx.undelivered_checks) == (1, 0)
    assert tx.next_check_timestamp == now + 8000
    group.refresh_from_db()
    assert (group.unreachable_since, group.last_check_error) == (None, "")


def test_an_undelivered_check_is_journalled_as_undelivered_and_not_counted(one_queue, refused_url):
    url_group("G", refused_url)
    tx = prepare()
    round_at(0, now_ms())

    assert not journal("check_sent").exists()
    [event] = journal("check_undelivered")
    assert (event.outcome, event.check_times) == ("UNDELIVERED", 0)
    assert event.detail["retry_in_ms"] == one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"]
    tx.refresh_from_db()
    assert (tx.state, tx.check_times, tx.undelivered_checks) == ("PREPARED", 0, 1)


def test_group_shown_unreachable_through_the_api(topic, db, owner, broker_settings):
    producer_group_create(name="G", check_url=closed_port_url())
    tx = prepare()
    round_for(tx, due_at(tx))
    data = owner.get("/api/v1/producer-groups/G").json()
    assert data["unreachable_since"] == due_at(tx)
    assert data["last_check_error"]


def test_a_group_whose_checks_all_time_out_is_backed_off_and_cleared_by_an_answer(
    one_queue, check_server, silent_url
):
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 5000
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 20_000
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 2
    url_group("DEAD", silent_url)
    url_group("OK", check_server.url, check_server)
    dead = prepare_many("DEAD", 6)
    ok = prepare_many("OK", 1)
    t0 = now_ms()

    result = round_at(0, t0)
    assert by_group(result["jobs"]) == {"DEAD": 2, "OK": 1}
    assert [o.answer for o in result["outcomes"] if o.job.producer_group == "DEAD"] == [
        "TIMEOUT",
        "TIMEOUT",
    ]
    row = group_row("DEAD")
    assert (row.check_failures, row.check_backoff_until) == (1, t0 + 5000)
    assert (group_row("OK").check_failures, group_row("OK").check_backoff_until) == (0, None)
    assert Transaction.objects.get(pk=ok[0].pk).check_times == 1

    # While backed off, none of the group's due transactions is claimed; other groups' are.
    late = prepare(producer_group="OK", body="late")
    assert late.born_timestamp < t0 + 4999
    result = round_at(0, t0 + 4999)
    assert [j.transaction_id for j in result["jobs"]] == [late.transaction_id]
    assert result["due"] == 1

    # Then one probe round (capped), failing again: the delay doubles, up to the interval.
    backoffs = []
    now = t0 + 5000
    for _ in range(3):
        result = round_at(0, now)
        assert by_group(result["jobs"])["DEAD"] == 2, result["jobs"]
        row = group_row("DEAD")
        backoffs.append(row.check_backoff_until - now)
        assert "DEAD" not in by_group(round_at(0, row.check_backoff_until - 1)["jobs"])
        now = row.check_backoff_until
    assert backoffs == [10_000, 20_000, 20_000]
    assert group_row("DEAD").check_failures == 4
    # Every probe took the group's two oldest due transactions; timed out after sending, each
    # of those checks counted.
    dead_counts = list(
        Transaction.objects.filter(pk__in=[t.pk for t in dead]).values_list(
            "check_times", flat=True
        )
    )
    assert sum(dead_counts) == 8 and min(dead_counts) == 1, dead_counts
    assert journal("check_sent", "DEAD").count() == 8

    # The producer answers again: one answer clears the backoff.
    ProducerGroup.objects.filter(name="DEAD").update(check_url=check_server.url)
    check_server.secrets["DEAD"] = group_row("DEAD").check_secret
    result = round_at(0, now)
    assert by_group(result["jobs"])["DEAD"] == 2
    assert all(o.answer == "UNKNOW" for o in result["outcomes"])
    row = group_row("DEAD")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


def test_a_group_whose_checks_are_all_undelivered_is_backed_off(
    one_queue, check_server, refused_url
):
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 1000
    url_group("DOWN", refused_url)
    down = prepare_many("DOWN", 3)
    t0 = now_ms()

    result = round_at(0, t0)
    assert [o.delivered for o in result["outcomes"]] == [False] * 3
    row = group_row("DOWN")
    assert (row.check_failures, row.check_backoff_until) == (1, t0 + 1000)
    assert row.unreachable_since == t0
    assert round_at(0, t0 + 999)["due"] == 0
    assert set(
        Transaction.objects.filter(pk__in=[t.pk for t in down]).values_list(
            "check_times", flat=True
        )
    ) == {0}


def test_one_answer_in_a_round_keeps_the_group_out_of_backoff(one_queue, check_server):
    """Backoff is for groups none of whose checks got an answer: one slow producer of a
    group that otherwise answers does not stop the group's checks."""
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    url_group("G", check_server.url, check_server)
    slow, fast = prepare_many("G", 2)
    release = threading.Event()

    def answer(check):
        if check["transaction_id"] == slow.transaction_id:
            release.wait(10)  # answers only once the broker has given up waiting
        return 200, {"state": "UNKNOW"}

    check_server.answer = answer
    try:
        result = round_at(0, now_ms())
    finally:
        release.set()
    assert sorted(o.answer for o in result["outcomes"]) == ["TIMEOUT", "UNKNOW"]
    row = group_row("G")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


def test_a_backed_off_group_is_cleared_by_a_later_answer_of_another_queue(
    topic, broker_settings, check_server
):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    url_group("G", check_server.url, check_server)
    ProducerGroup.objects.filter(name="G").update(check_failures=3, check_backoff_until=1)
    tx = prepare()
    round_at(tx.half_queue_id, now_ms())
    row = group_row("G")
    assert (row.check_failures, row.check_backoff_until) == (0, None)


def test_a_dead_group_does_not_delay_a_healthy_one(
    one_queue, check_server, silent_url, refused_url
):
    """300 due transactions of DEAD (requests sent, never answered) and 20 of DOWN (connection
    refused) ahead of HEALTHY's few in the same half queue: HEALTHY's transactions are checked
    in the first round in which they are due; DEAD and DOWN are capped per round and backed
    off; DEAD's timed-out checks count as UNKNOW, DOWN's refused ones do not count."""
    one_queue["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 4
    # Long enough for HEALTHY's answers on a loaded CI machine (300 ms lost two of them there
    # once), short enough that the fresh transactions below are born within the 5 s backoff.
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 1000
    one_queue["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 5000
    one_queue["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 30_000
    one_queue["HALFMOON_TRANSACTION_CHECK_MAX"] = 1000
    url_group("DEAD", silent_url)
    url_group("DOWN", refused_url)
    url_group("HEALTHY", check_server.url, check_server)
    prepare_many("DEAD", 300)
    prepare_many("DOWN", 20)
    healthy = prepare_many("HEALTHY", 3)
    t0 = now_ms()

    # Round 1: everyone is due; each dead group gets its cap, HEALTHY all of its three.
    result = round_at(0, t0)
    assert by_group(result["jobs"]) == {"DEAD": 4, "DOWN": 4, "HEALTHY": 3}
    assert sorted(check_server.received_ids()) == sorted(tx.transaction_id for tx in healthy)
    answers = Counter((o.job.producer_group, o.answer, o.delivered) for o in result["outcomes"])
    assert answers == {
        ("DEAD", "TIMEOUT", True): 4,
        ("DOWN", "", False): 4,
        ("HEALTHY", "UNKNOW", True): 3,
    }
    # Timed out after sending: counted as UNKNOW. Refused: not counted, retried with backoff.
    assert Counter(journal("check_sent", "DEAD").values_list("outcome", flat=True)) == {
        "TIMEOUT": 4
    }
    assert Transaction.objects.filter(producer_group="DEAD", check_times=1).count() == 4
    assert not journal("check_sent", "DOWN").exists()
    assert journal("check_undelivered", "DOWN").count() == 4
    assert not Transaction.objects.filter(producer_group="DOWN", check_times__gt=0).exists()
    for name in ("DEAD", "DOWN"):
        row = group_row(name)
        assert (row.check_failures, row.check_backoff_until) == (1, t0 + 5000), name
    assert group_row("DOWN").unreachable_since == t0
    assert group_row("DEAD").unreachable_since is None  # it did receive the requests

    # New HEALTHY transactions become due while the dead groups are backed off: the next
    # round takes them and nothing of DEAD or DOWN, whose 312 due transactions wait.
    fresh = prepare_many("HEALTHY", 2)
    t1 = max(tx.born_timestamp for tx in fresh)
    assert t1 < t0 + 5000
    result = round_at(0, t1)
    assert by_group(result["jobs"]) == {"HEALTHY": 2}
    assert [o.answer for o in result["outcomes"]] == ["UNKNOW", "UNKNOW"]
    assert len(check_server.received()) == 5

    # When the backoff ends, one capped probe each, then a longer backoff.
    result = round_at(0, t0 + 5000)
    assert by_group(result["jobs"]) == {"DEAD": 4, "DOWN": 4}
    for name in ("DEAD", "DOWN"):
        row = group_row(name)
        assert (row.check_failures, row.check_backoff_until) == (2, t0 + 15_000), name
    assert round_at(0, t0 + 14_999)["jobs"] == []
    # Over all of this, DEAD saw 8 requests of its 300 due transactions, DOWN 8 attempts.
    assert journal("check_sent", "DEAD").count() == 8
    assert journal("check_undelivered", "DOWN").count() == 8
    assert set(
        Transaction.objects.filter(producer_group="HEALTHY").values_list("check_times", flat=True)
    ) == {1}

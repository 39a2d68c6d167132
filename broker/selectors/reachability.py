"""Reads of the producer groups' reachability: which groups' back-checks reach no producer, and
since when (the overview's unreachable groups, the alert rule, the metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import (
    F,
    Q,
)

from broker.models import ProducerGroup
from broker.rules.checks import group_down_since


@dataclass(frozen=True)
class UnreachableGroup:
    """A producer group whose checks are not getting through: undelivered since
    ``unreachable_since`` (ms) or in backoff until ``check_backoff_until`` (ms)."""

    name: str
    check_url: str | None
    unreachable_since: int | None
    last_check_error: str
    check_failures: int
    check_backoff_until: int | None
    pending: int


def unreachable_groups(now: int, pending: dict[str, int]) -> list[UnreachableGroup]:
    """Producer groups whose last check could not be delivered (``unreachable_since`` set),
    whose checks have gone unanswered since an earlier round (``unanswered_since`` set: the
    groups ``broker.rules.checks.group_down_since`` calls down) or that are in check backoff
    at ``now`` (``check_backoff_until`` after it), longest unreachable first; ``pending`` maps
    group names to their pending counts."""
    groups = ProducerGroup.objects.filter(
        Q(unreachable_since__isnull=False)
        | Q(unanswered_since__isnull=False)
        | Q(check_backoff_until__gt=now)
    ).order_by(F("unreachable_since").asc(nulls_last=True), "name")
    return [
        UnreachableGroup(
            name=g.name,
            check_url=g.check_url,
            unreachable_since=g.unreachable_since,
            last_check_error=g.last_check_error,
            check_failures=g.check_failures,
            check_backoff_until=g.check_backoff_until,
            pending=pending.get(g.name, 0),
        )
        for g in groups
    ]


@dataclass(frozen=True)
class GroupReachability:
    """A producer group's back-check reachability: ``down_since`` (ms) when its checks have
    not got through since then (``broker.rules.checks.group_down_since``), else None; with
    the last error, the failed rounds in a row and the backoff (ms)."""

    name: str
    check_url: str | None
    down_since: int | None
    last_check_error: str
    check_failures: int
    check_backoff_until: int | None

    @property
    def reachable(self) -> bool:
        """True when the group's checks get through (``down_since`` is None)."""
        return self.down_since is None


def producer_group_reachability() -> list[GroupReachability]:
    """Every producer group by name with its reachability. One query over the groups."""
    return [
        GroupReachability(
            name=g.name,
            check_url=g.check_url,
            down_since=group_down_since(
                unreachable_since=g.unreachable_since, unanswered_since=g.unanswered_since
            ),
            last_check_error=g.last_check_error,
            check_failures=g.check_failures,
            check_backoff_until=g.check_backoff_until,
        )
        for g in ProducerGroup.objects.order_by("name")
    ]

"""Operators scoped to groups: the rule of what an operator may act on.

An operator is either *full* (a console user with ``console.operate_console``, a superuser, an
admin access key: every group) or *scoped* by operator grants (``broker.models.OperatorGrant``):
named producer groups, whose transactions it may commit, roll back, resume and check now, and
named consumer groups, whose offsets and dead-letter queue it may operate. Everything else it
may only view. ``OperatorScope`` is that answer for one actor; ``broker.selectors.grants.
operator_scope`` reads it from the grants, and every interface (console, API, bulk previews)
asks it through the methods here, so the rule has one definition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

GrantKind = Literal["producer_group", "consumer_group"]
PRODUCER_GROUP: GrantKind = "producer_group"
CONSUMER_GROUP: GrantKind = "consumer_group"
GRANT_KINDS: tuple[GrantKind, ...] = (PRODUCER_GROUP, CONSUMER_GROUP)


@dataclass(frozen=True)
class GroupRef:
    """A group by kind and name: the object of an object permission when no model instance is
    at hand (a group named in a URL, a transaction's ``producer_group``)."""

    kind: GrantKind
    name: str

    @classmethod
    def producer(cls, name: str) -> GroupRef:
        return cls(PRODUCER_GROUP, name)

    @classmethod
    def consumer(cls, name: str) -> GroupRef:
        return cls(CONSUMER_GROUP, name)


@dataclass(frozen=True)
class OperatorScope:
    """The groups an actor may operate. ``None`` for a kind: every group of that kind (a full
    operator); a frozenset: exactly those (empty: none)."""

    producer_groups: frozenset[str] | None
    consumer_groups: frozenset[str] | None

    @property
    def is_full(self) -> bool:
        """Every producer and every consumer group."""
        return self.producer_groups is None and self.consumer_groups is None

    @property
    def operates_any(self) -> bool:
        """At least one group of either kind (a full or a scoped operator; False: a viewer)."""
        return (
            self.producer_groups is None
            or self.consumer_groups is None
            or bool(self.producer_groups)
            or bool(self.consumer_groups)
        )

    def may_operate_producer_group(self, name: str) -> bool:
        """Commit, roll back, resume checks of and check now the transactions of producer
        group ``name``."""
        return self.producer_groups is None or name in self.producer_groups

    def may_operate_consumer_group(self, name: str) -> bool:
        """Operate consumer group ``name``: reset its offsets, skip its backlog, resend to it
        (from its dead-letter queue or any message)."""
        return self.consumer_groups is None or name in self.consumer_groups

    def may_operate(self, group: GroupRef) -> bool:
        """``may_operate_producer_group`` or ``may_operate_consumer_group`` by ``group.kind``."""
        if group.kind == PRODUCER_GROUP:
            return self.may_operate_producer_group(group.name)
        return self.may_operate_consumer_group(group.name)

    def as_json(self) -> dict[str, list[str] | None]:
        """``{"producer_groups": [...] | None, "consumer_groups": [...] | None}``, sorted (for an
        audit entry's scope and the API)."""
        return {
            "producer_groups": _sorted_or_none(self.producer_groups),
            "consumer_groups": _sorted_or_none(self.consumer_groups),
        }


def _sorted_or_none(groups: frozenset[str] | None) -> list[str] | None:
    return None if groups is None else sorted(groups)


FULL_SCOPE = OperatorScope(producer_groups=None, consumer_groups=None)
"""A full operator's scope: every group."""

NO_SCOPE = OperatorScope(producer_groups=frozenset(), consumer_groups=frozenset())
"""A viewer's scope: no group."""


def operator_scope_of(*, full: bool, grants: Iterable[tuple[str, str]]) -> OperatorScope:
    """The scope of an actor: ``FULL_SCOPE`` when ``full`` (its grants then add nothing), else
    exactly the groups of ``grants``, ``(kind, group name)`` pairs whose kind is one of
    ``GRANT_KINDS`` (others are ignored)."""
    if full:
        return FULL_SCOPE
    producer: set[str] = set()
    consumer: set[str] = set()
    for kind, name in grants:
        if kind == PRODUCER_GROUP:
            producer.add(name)
        elif kind == CONSUMER_GROUP:
            consumer.add(name)
    return OperatorScope(producer_groups=frozenset(producer), consumer_groups=frozenset(consumer))


def scope_description(scope: OperatorScope) -> str:
    """The scope in words, for a page or a message: "every group", "no group", or
    "producer groups a, b; consumer group c"."""
    if scope.is_full:
        return "every group"
    parts = []
    for noun, groups in (
        ("producer group", scope.producer_groups),
        ("consumer group", scope.consumer_groups),
    ):
        if groups is None:
            parts.append(f"every {noun}")
        elif groups:
            plural = "s" if len(groups) > 1 else ""
            parts.append(f"{noun}{plural} {', '.join(sorted(groups))}")
    return "; ".join(parts) or "no group"

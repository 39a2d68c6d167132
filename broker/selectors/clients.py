"""Reads of the RocketMQ 5 clients seen over gRPC (``ClientConnection``): rocketmq-dashboard's
connection lists of a producer group and of a consumer group (RocketMQ ``ProducerManager`` /
``ConsumerManager`` channels), shared by the API and the console.

A client is live while it is connected (no ``disconnected_timestamp``) and was heard from
(settings or heartbeat) within ``HALFMOON_GRPC_CLIENT_EXPIRY_MS`` (RocketMQ's
channelExpiredTimeout): ``client_connection_live_q``, the one definition of "live". The lists
also show, marked not live, the clients gone within ``RECENTLY_GONE_MS`` (disconnected, or
silent past the expiry without a word), so an operator sees who just left.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet

from broker.conf import conf
from broker.models import ClientConnection, ConsumerGroup, ProducerGroup
from broker.rules.clock import now_ms
from broker.selectors.queries import first_or_not_found

RECENTLY_GONE_MS = 3_600_000
"""Clients disconnected, or last heard from, within this long (ms, one hour) stay in the
connection lists, marked not live."""


def client_connection_live_q(*, now: int) -> Q:
    """The condition of a live client at ``now`` (ms): connected (``disconnected_timestamp``
    null) and last heard from at or after ``now - HALFMOON_GRPC_CLIENT_EXPIRY_MS``."""
    return Q(
        disconnected_timestamp__isnull=True,
        last_heartbeat_timestamp__gte=now - conf.grpc_client_expiry_ms,
    )


def _shown_q(*, now: int) -> Q:
    """Live clients, and those gone (disconnected or silent) within ``RECENTLY_GONE_MS``."""
    since = now - RECENTLY_GONE_MS
    return (
        client_connection_live_q(now=now)
        | Q(disconnected_timestamp__gte=since)
        | Q(disconnected_timestamp__isnull=True, last_heartbeat_timestamp__gte=since)
    )


def client_connections(*, now: int | None = None) -> QuerySet[ClientConnection]:
    """Every client shown at ``now`` (ms, default the clock): live ones and those gone within
    ``RECENTLY_GONE_MS``, each annotated ``live`` (bool), live first, then the most recently
    heard from first, then by client id."""
    now = now_ms() if now is None else now
    live = ExpressionWrapper(client_connection_live_q(now=now), output_field=BooleanField())
    return (
        ClientConnection.objects.filter(_shown_q(now=now))
        .annotate(live=live)
        .order_by("-live", "-last_heartbeat_timestamp", "client_id")
    )


def client_connections_of_producer_group(
    group: str, *, now: int | None = None
) -> list[ClientConnection]:
    """The clients of producer group ``group`` (``ClientConnection.producer_groups`` holds
    it; ``broker.rules.producer_groups.grpc_producer_group`` says which group a client sends
    as) shown at ``now`` (ms), ordered and annotated ``live`` as ``client_connections``.
    Two queries.

    Raises:
        NotFound: ``producer_group_not_found``, no producer group ``group``.
    """
    first_or_not_found(ProducerGroup.objects.filter(name=group), "producer_group", group)
    return list(client_connections(now=now).filter(producer_groups__contains=[group]))


def client_connections_of_consumer_group(
    group: str, *, now: int | None = None
) -> list[ClientConnection]:
    """The clients (simple and push consumers) of consumer group ``group`` shown at ``now``
    (ms), ordered and annotated ``live`` as ``client_connections``. Two queries.

    Raises:
        NotFound: ``consumer_group_not_found``, no consumer group ``group``.
    """
    first_or_not_found(ConsumerGroup.objects.filter(name=group), "consumer_group", group)
    return list(client_connections(now=now).filter(consumer_group=group))


@dataclass(frozen=True)
class ClientCounts:
    """A group's clients at a moment: ``live`` ones and ``gone`` ones (disconnected or silent
    within ``RECENTLY_GONE_MS``)."""

    live: int = 0
    gone: int = 0

    @property
    def shown(self) -> int:
        """Clients a group's connection list shows (live and recently gone)."""
        return self.live + self.gone


def _counts(pairs: list[tuple[list[str], bool]]) -> dict[str, ClientCounts]:
    live: Counter[str] = Counter()
    gone: Counter[str] = Counter()
    for groups, is_live in pairs:
        (live if is_live else gone).update(set(groups))
    return {g: ClientCounts(live[g], gone[g]) for g in live.keys() | gone.keys()}


def client_counts_by_producer_group(*, now: int | None = None) -> dict[str, ClientCounts]:
    """Per producer group, its clients shown at ``now`` (ms): live and recently gone. Groups
    with none are absent. One query (the shown clients' groups, counted here)."""
    rows = client_connections(now=now).exclude(producer_groups=[])
    return _counts([(groups, live) for groups, live in rows.values_list("producer_groups", "live")])


def client_counts_by_consumer_group(*, now: int | None = None) -> dict[str, ClientCounts]:
    """Per consumer group, its clients shown at ``now`` (ms): live and recently gone. Groups
    with none are absent. One query."""
    rows = client_connections(now=now).exclude(consumer_group="")
    return _counts([([group], live) for group, live in rows.values_list("consumer_group", "live")])

"""The console's reads: the stuck-transaction list (one filter, shared by the list page, its
live row updates and the bulk actions on a filter), its keyset pages, and a transaction's
timeline from the broker's own journals (shared by the transaction page and
``GET /api/v1/transactions/{id}/timeline``).

The filter is ``stuck_transactions``; ``console.forms.transactions.TransactionFilterForm`` validates the
URL's parameters into exactly its keyword arguments (``console.forms.transactions.filters_from_form``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery

from broker.conf import conf
from broker.models import ProducerGroup, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.rules.states import TransactionState
from broker.rules.stuck import stuck_reason
from broker.selectors.grants import producer_group_in_own_or_operated
from broker.selectors.queries import first_or_not_found, key_match

STUCK_STATES: tuple[str, ...] = (TransactionState.PREPARED, TransactionState.DISCARDED)
"""The states the stuck list shows (and its ``states`` default)."""

_CHECK_KINDS = (TransactionEvent.Kind.CHECK_SENT, TransactionEvent.Kind.CHECK_UNDELIVERED)


def stuck_transactions(
    *,
    states: Sequence[str] | None = None,
    producer_group: str = "",
    topic: str = "",
    min_age_ms: int | None = None,
    min_check_times: int | None = None,
    discard_reason: str = "",
    q: str = "",
    now: int | None = None,
) -> QuerySet[Transaction]:
    """Unresolved transactions matching a filter, oldest first (``born_timestamp``, then
    ``transaction_id``): the console's stuck list and the set a bulk action on a filter acts on.

    Args:
        states: any of PREPARED and DISCARDED; None or empty means both. Other states are
            ignored (a resolved transaction is never stuck).
        producer_group, topic: exact names; "" means any.
        min_age_ms: only transactions born at least this long before ``now`` (ms).
        min_check_times: only those with at least this many checks delivered.
        discard_reason: a ``DiscardReason`` value (``check_max``, ``file_reserved_time``);
            "" means any (PREPARED ones have none).
        q: exact msg id / transaction id (the same: UNIQ_KEY), or one of the message keys.
        now: the clock for ``min_age_ms`` (ms; default now).

    Returns:
        an unevaluated QuerySet; ``stuck_page`` pages it with the index
        ``transaction_state_born``.
    """
    wanted = [s for s in (states or STUCK_STATES) if s in STUCK_STATES] or list(STUCK_STATES)
    qs = Transaction.objects.filter(state__in=wanted)
    if producer_group:
        qs = qs.filter(producer_group=producer_group)
    if topic:
        qs = qs.filter(topic=topic)
    if min_age_ms is not None:
        qs = qs.filter(born_timestamp__lte=(now if now is not None else now_ms()) - min_age_ms)
    if min_check_times is not None:
        qs = qs.filter(check_times__gte=min_check_times)
    if discard_reason:
        qs = qs.filter(discard_reason=discard_reason)
    if q:
        qs = qs.filter(Q(pk=q) | key_match(q))
    return qs.order_by("born_timestamp", "transaction_id")


@dataclass(frozen=True, order=True)
class Cursor:
    """A position in the stuck list: the sort key ``(born_timestamp, transaction_id)`` of a
    row. In URLs as ``<born_timestamp>.<transaction_id>`` (a transaction id may hold dots, a
    timestamp not)."""

    born_timestamp: int
    transaction_id: str

    def encode(self) -> str:
        return f"{self.born_timestamp}.{self.transaction_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Parse ``encode``'s form. Raises ValueError for anything else."""
        born, sep, tid = text.partition(".")
        if not sep or not tid or not born.isdigit() or len(born) > 19:
            raise ValueError(f"not a cursor: {text!r}")
        return cls(int(born), tid)

    @classmethod
    def of(cls, tx: Transaction) -> Cursor:
        return cls(tx.born_timestamp, tx.transaction_id)


@dataclass
class StuckRow:
    """One row of the stuck list: the transaction (with ``last_check_kind``,
    ``last_check_outcome`` and ``last_check_at`` of its latest check event annotated), its
    producer group (None if the group was deleted), why it is stuck (``broker.rules.stuck``),
    its age (ms) and the check max it counts against."""

    tx: Transaction
    group: ProducerGroup | None
    reason: str
    age_ms: int
    check_max: int

    @property
    def cursor(self) -> str:
        return Cursor.of(self.tx).encode()


@dataclass
class StuckPage:
    """A page of the stuck list: ``rows`` oldest first; ``next_cursor`` / ``prev_cursor``
    (None on the last / first page) go into the ``after`` / ``before`` URL parameters."""

    rows: list[StuckRow] = field(default_factory=list)
    next_cursor: Cursor | None = None
    prev_cursor: Cursor | None = None


def last_check_annotate(qs: QuerySet[Transaction]) -> QuerySet[Transaction]:
    """Add the latest ``check_sent`` / ``check_undelivered`` event of each row as
    ``last_check_kind``, ``last_check_outcome`` (the answer) and ``last_check_at`` (ms): three
    correlated subqueries read through the index ``event_transaction_time``, so a page costs no
    query per row."""
    latest = TransactionEvent.objects.filter(
        transaction_id=OuterRef("pk"), kind__in=_CHECK_KINDS
    ).order_by("-timestamp", "-id")
    return qs.annotate(
        last_check_kind=Subquery(latest.values("kind")[:1]),
        last_check_outcome=Subquery(latest.values("outcome")[:1]),
        last_check_at=Subquery(latest.values("timestamp")[:1]),
    )


def _after(cursor: Cursor) -> Q:
    # born >= b is an index condition; the OR only breaks ties within one born_timestamp.
    return Q(born_timestamp__gte=cursor.born_timestamp) & (
        Q(born_timestamp__gt=cursor.born_timestamp)
        | Q(born_timestamp=cursor.born_timestamp, transaction_id__gt=cursor.transaction_id)
    )


def _before(cursor: Cursor) -> Q:
    return Q(born_timestamp__lte=cursor.born_timestamp) & (
        Q(born_timestamp__lt=cursor.born_timestamp)
        | Q(born_timestamp=cursor.born_timestamp, transaction_id__lt=cursor.transaction_id)
    )


def _rows(transactions: list[Transaction], now: int) -> list[StuckRow]:
    """Wrap transactions into rows, reading their producer groups in one query."""
    names = {tx.producer_group for tx in transactions}
    groups = {g.name: g for g in ProducerGroup.objects.filter(name__in=names)} if names else {}
    check_max = conf.transaction_check_max
    rows = []
    for tx in transactions:
        group = groups.get(tx.producer_group)
        reason = stuck_reason(
            state=tx.state,
            discard_reason=tx.discard_reason,
            check_times=tx.check_times,
            check_max=check_max,
            last_answer=getattr(tx, "last_check_outcome", None) or "",
            next_check_timestamp=tx.next_check_timestamp,
            group_unreachable_since=group.unreachable_since if group else None,
            group_backoff_until=group.check_backoff_until if group else None,
            now=now,
        )
        rows.append(StuckRow(tx, group, reason, now - tx.born_timestamp, check_max))
    return rows


def stuck_page(
    filters: dict[str, Any],
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    per_page: int = 50,
    now: int | None = None,
) -> StuckPage:
    """One page of ``stuck_transactions(**filters)``, oldest first, by keyset.

    ``after``: the page starts after this row (the "next page" link); ``before``: the page
    ends before it ("previous page"); neither: the first page. A constant number of queries
    whatever the page size: one per state asked for (each an index scan of
    ``transaction_state_born`` ``(state, born_timestamp)`` with a LIMIT, merged here: one
    index scan cannot give the order of two states at once), plus one for the producer
    groups. The latest check of each row comes with it (``last_check_annotate``).

    Args:
        filters: the keyword arguments of ``stuck_transactions`` (without ``now``).
        per_page: rows per page (1..200 in the console).
        now: the clock (ms) for ages and ``min_age_ms``.
    """
    now = now if now is not None else now_ms()
    states = [s for s in (filters.get("states") or STUCK_STATES) if s in STUCK_STATES]
    states = states or list(STUCK_STATES)
    backwards = before is not None and after is None
    order = (
        ("-born_timestamp", "-transaction_id")
        if backwards
        else ("born_timestamp", "transaction_id")
    )
    parts: list[list[Transaction]] = []
    for state in states:
        qs = stuck_transactions(**{**filters, "states": [state]}, now=now)
        if backwards:
            qs = qs.filter(_before(before))
        elif after is not None:
            qs = qs.filter(_after(after))
        parts.append(list(last_check_annotate(qs.order_by(*order))[: per_page + 1]))
    merged = list(heapq.merge(*parts, key=Cursor.of, reverse=backwards))[: per_page + 1]
    more = len(merged) > per_page
    page_txs = merged[:per_page]
    if backwards:
        page_txs.reverse()
    page = StuckPage(rows=_rows(page_txs, now))
    if page_txs:
        first, last = Cursor.of(page_txs[0]), Cursor.of(page_txs[-1])
        if backwards:
            page.prev_cursor = first if more else None
            page.next_cursor = last
        else:
            page.next_cursor = last if more else None
            page.prev_cursor = first if after is not None else None
    elif backwards:
        page.next_cursor = before
    return page


def stuck_row(
    transaction_id: str, filters: dict[str, Any], *, now: int | None = None
) -> StuckRow | None:
    """The stuck-list row of one transaction if it matches ``filters`` (the keyword arguments
    of ``stuck_transactions``), else None (e.g. it was committed meanwhile). Two queries."""
    now = now if now is not None else now_ms()
    qs = last_check_annotate(stuck_transactions(**filters, now=now).filter(pk=transaction_id))
    tx = qs.first()
    return _rows([tx], now)[0] if tx is not None else None


def transaction_get(transaction_id: str) -> Transaction:
    """A transaction by id, unlocked (a read; services lock with ``transaction_get_locked``).

    Raises:
        NotFound: ``transaction_not_found``.
    """
    return first_or_not_found(
        Transaction.objects.filter(pk=transaction_id), "transaction", transaction_id
    )


def transaction_list(
    *,
    state: str | None = None,
    producer_group: str | None = None,
    topic: str | None = None,
    producer_groups: list[str] | None = None,
    operator_access_key_id: int | None = None,
) -> QuerySet[Transaction]:
    """Transactions, oldest first, filtered; ``producer_groups`` None means every group (admin),
    otherwise the caller's groups only, plus, with ``operator_access_key_id``, the producer
    groups that access key operates (its ``OperatorGrant`` rows, read in the same statement:
    ``broker.selectors.grants.producer_group_in_own_or_operated``)."""
    qs = Transaction.objects.all()
    if state:
        qs = qs.filter(state=state)
    if producer_group:
        qs = qs.filter(producer_group=producer_group)
    if topic:
        qs = qs.filter(topic=topic)
    if producer_groups is not None and operator_access_key_id is not None:
        qs = qs.filter(
            producer_group_in_own_or_operated(
                producer_groups, operated_by_access_key_id=operator_access_key_id
            )
        )
    elif producer_groups is not None:
        qs = qs.filter(producer_group__in=producer_groups)
    return qs.order_by("born_timestamp", "transaction_id")

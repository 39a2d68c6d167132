"""Reads of the operators' audit log (``AuditEntry``, ``AuditTarget``): the audit page, newest
first with keyset pages, and a bulk action's page (its frozen targets, paged)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, Q, QuerySet

from broker.errors import NotFound
from broker.models import AuditEntry, AuditTarget, Transaction

AUDIT_PAGE_SIZE = 50
TARGETS_SHOWN = 10  # targets listed with each entry on the audit page
BULK_ENTRY_ACTIONS = (
    AuditEntry.Action.BULK_COMMIT,
    AuditEntry.Action.BULK_ROLLBACK,
    AuditEntry.Action.BULK_RESUME_CHECK,
)


@dataclass
class AuditPage:
    """One page of the audit log: ``entries`` newest first, each with its first
    ``TARGETS_SHOWN`` targets prefetched as ``shown_targets``; ``next_before`` is the
    ``before`` parameter of the next (older) page, None on the last."""

    entries: list[AuditEntry] = field(default_factory=list)
    next_before: int | None = None


def audit_entries_matching(
    *,
    actor: str = "",
    action: str = "",
    via: str = "",
    transaction_id: str = "",
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> QuerySet[AuditEntry]:
    """The audit entries the audit page's filter matches (see ``audit_entries``), unordered and
    unevaluated: the page and the incident export read the same set."""
    qs = AuditEntry.objects.all()
    if actor:
        qs = qs.filter(Q(actor=actor) | Q(actor__endswith=f":{actor}"))
    if action:
        qs = qs.filter(action=action)
    if via:
        qs = qs.filter(via=via)
    if transaction_id:
        qs = qs.filter(targets__transaction_id=transaction_id)
    if since_ms is not None:
        qs = qs.filter(timestamp__gte=since_ms)
    if until_ms is not None:
        qs = qs.filter(timestamp__lt=until_ms)
    return qs


def audit_entries(
    *,
    actor: str = "",
    action: str = "",
    via: str = "",
    transaction_id: str = "",
    since_ms: int | None = None,
    until_ms: int | None = None,
    before: int | None = None,
    limit: int = AUDIT_PAGE_SIZE,
) -> AuditPage:
    """The audit log filtered, newest first (by id), ``limit`` entries below id ``before``.

    Args:
        actor: exact actor (``console:alice``, ``operator:ops-key``) or just the name after
            the colon (``alice``); "" means anyone.
        action: an ``AuditEntry.Action``; via: ``console`` or ``api``; "" means any.
        transaction_id: only entries that targeted this transaction.
        since_ms, until_ms: ``timestamp`` range (ms, inclusive start, exclusive end).
        before: keyset cursor, an entry id (exclusive).

    Returns:
        ``AuditPage``. Two queries (entries, their first targets).
    """
    qs = audit_entries_matching(
        actor=actor,
        action=action,
        via=via,
        transaction_id=transaction_id,
        since_ms=since_ms,
        until_ms=until_ms,
    )
    if before is not None:
        qs = qs.filter(pk__lt=before)
    shown = AuditTarget.objects.order_by("id")[:TARGETS_SHOWN]
    entries = list(
        qs.order_by("-id").prefetch_related(
            Prefetch("targets", queryset=shown, to_attr="shown_targets")
        )[: limit + 1]
    )
    more = len(entries) > limit
    entries = entries[:limit]
    return AuditPage(entries=entries, next_before=entries[-1].pk if more and entries else None)


def bulk_get(bulk_id: int) -> AuditEntry:
    """The bulk action ``bulk_id`` (an ``AuditEntry`` whose action is ``bulk-*``).

    Raises:
        NotFound: 404 ``bulk_not_found``.
    """
    entry = AuditEntry.objects.filter(pk=bulk_id, action__in=BULK_ENTRY_ACTIONS).first()
    if entry is None:
        raise NotFound(
            f"Bulk action {bulk_id} does not exist.",
            code="bulk_not_found",
            details={"bulk_id": bulk_id},
        )
    return entry


@dataclass
class TargetRow:
    """A bulk's target and its transaction now (None if it no longer exists)."""

    target: AuditTarget
    tx: Transaction | None


def bulk_targets_page(entry: AuditEntry, *, page: int = 1, per_page: int = 100) -> Page:
    """Page ``page`` (1-based; out of range gives the last) of ``entry``'s targets in their
    frozen order, as ``TargetRow`` objects (``page.object_list``). Three queries."""
    paginator = Paginator(entry.targets.order_by("id"), per_page)
    current = paginator.get_page(page)
    targets = list(current.object_list)
    txs = Transaction.objects.in_bulk([t.transaction_id for t in targets])
    current.object_list = [TargetRow(t, txs.get(t.transaction_id)) for t in targets]
    return current

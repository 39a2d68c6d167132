"""Reads of an incident export (``broker.services.operations.incident_export``): the transactions a
selection or a filter names (the stuck list's, the message search's, the audit log's), and
about them their timelines, the audit log's entries and the latest reconciliation's anomalies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from django.db.models import QuerySet

from broker.errors import InvalidInput, NotFound
from broker.models import (
    AuditEntry,
    AuditTarget,
    ReconciliationAnomaly,
    ReconciliationRun,
    Transaction,
)
from broker.selectors.audit import audit_entries_matching
from broker.selectors.message_search import MessageQuery, messages_search
from broker.selectors.reconciliation import reconciliation_run_latest_or_none
from broker.selectors.timeline import transaction_timeline
from broker.selectors.timeline_entry import TimelineEntry
from broker.selectors.transactions import stuck_transactions

EXPORT_MAX_TRANSACTIONS = 1000
"""The most transactions one export holds: each costs its timeline's few indexed queries (about
5 ms a transaction on these machines: ~5 s and a few MB of zip at the bound)."""

IncidentKind = Literal["selection", "stuck", "messages", "audit"]
INCIDENT_KINDS: tuple[IncidentKind, ...] = ("selection", "stuck", "messages", "audit")


@dataclass(frozen=True)
class IncidentScope:
    """What an export is made from: ``kind`` ``selection`` (``transaction_ids``), or the
    filter of the stuck list (``stuck``: ``stuck_transactions``' keyword arguments), of the
    message search (``messages``: ``MessageQuery``'s fields; the transactions of the messages
    found) or of the audit log (``audit``: ``audit_entries_matching``'s keyword arguments; the
    transactions its entries acted on), in ``filters``. ``producer_groups``: only transactions
    of these groups (None: any; an access key's rights)."""

    kind: IncidentKind
    transaction_ids: tuple[str, ...] = ()
    filters: dict[str, Any] = field(default_factory=dict)
    producer_groups: frozenset[str] | None = None

    def as_json(self) -> dict[str, Any]:
        """The scope as the export's ``filter.json`` records it."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "selection":
            out["transaction_ids"] = list(self.transaction_ids)
        else:
            out["filters"] = self.filters
        if self.producer_groups is not None:
            out["producer_groups"] = sorted(self.producer_groups)
        return out


@dataclass
class Incident:
    """What an export holds: the transactions (oldest first), each one's timeline, the audit
    entries that acted on any of them (newest first) with their targets among them, and the
    latest successful reconciliation run with its anomalies about them (None before the
    first run)."""

    scope: IncidentScope
    transactions: list[Transaction]
    timelines: dict[str, list[TimelineEntry]]
    audit: list[tuple[AuditEntry, list[AuditTarget]]]
    run: ReconciliationRun | None
    anomalies: list[ReconciliationAnomaly]


def _candidates(scope: IncidentScope) -> QuerySet[Transaction]:
    if scope.kind == "selection":
        return Transaction.objects.filter(pk__in=list(scope.transaction_ids))
    if scope.kind == "stuck":
        return stuck_transactions(**scope.filters)
    if scope.kind == "messages":
        msg_ids = messages_search(MessageQuery(**scope.filters)).values("msg_id")
        return Transaction.objects.filter(pk__in=msg_ids)
    entries = audit_entries_matching(**scope.filters)
    targeted = AuditTarget.objects.filter(entry__in=entries).values("transaction_id")
    return Transaction.objects.filter(pk__in=targeted)


def incident_transactions(scope: IncidentScope) -> list[Transaction]:
    """The transactions ``scope`` names, oldest first (born time, then id), at most
    ``EXPORT_MAX_TRANSACTIONS``. A selected id with no transaction adds nothing.

    Raises:
        InvalidInput: ``export_empty`` (none), ``export_too_large`` (more than
            ``EXPORT_MAX_TRANSACTIONS``: ``details.count``, ``details.max``; narrow the filter).
    """
    qs = _candidates(scope)
    if scope.producer_groups is not None:
        qs = qs.filter(producer_group__in=sorted(scope.producer_groups))
    rows = list(qs.order_by("born_timestamp", "transaction_id")[: EXPORT_MAX_TRANSACTIONS + 1])
    if len(rows) > EXPORT_MAX_TRANSACTIONS:
        count = qs.count()
        raise InvalidInput(
            f"{count} transactions match; an export holds at most {EXPORT_MAX_TRANSACTIONS}: "
            "narrow the filter or the selection.",
            code="export_too_large",
            details={"count": count, "max": EXPORT_MAX_TRANSACTIONS},
        )
    if not rows:
        raise InvalidInput(
            "No transaction matches: there is nothing to export.",
            code="export_empty",
            details={"scope": scope.as_json()},
        )
    return rows


def _timeline(transaction_id: str) -> list[TimelineEntry]:
    try:
        return transaction_timeline(transaction_id)
    except NotFound:  # pruned between the two reads
        return []


def incident_read(scope: IncidentScope) -> Incident:
    """Everything an export of ``scope`` holds (see ``Incident``).

    Raises:
        InvalidInput: as ``incident_transactions``.
    """
    transactions = incident_transactions(scope)
    ids = [tx.pk for tx in transactions]
    timelines = {tid: _timeline(tid) for tid in ids}
    targets = AuditTarget.objects.filter(transaction_id__in=ids).order_by("entry_id", "id")
    by_entry: dict[int, list[AuditTarget]] = {}
    for target in targets:
        by_entry.setdefault(target.entry_id, []).append(target)
    entries = AuditEntry.objects.filter(pk__in=list(by_entry)).order_by("-id")
    run = reconciliation_run_latest_or_none()
    anomalies = (
        list(ReconciliationAnomaly.objects.filter(run=run, transaction_id__in=ids).order_by("id"))
        if run
        else []
    )
    return Incident(
        scope=scope,
        transactions=transactions,
        timelines=timelines,
        audit=[(entry, by_entry[entry.pk]) for entry in entries],
        run=run,
        anomalies=anomalies,
    )

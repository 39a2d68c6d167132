"""The repairs a rebuild plans for one chunk, and their writes.

``compare`` fills a ``RepairPlan`` (plain values); ``RepairPlan.apply`` writes it inside the
chunk's database transaction, whose ``Transaction`` and ``Resolution`` rows are locked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef

from broker.constants import HALF_TOPIC
from broker.models import Message, Resolution, Transaction
from broker.rules.clock import now_ms
from broker.rules.recovery_report import Difference, plain
from broker.rules.states import TransactionState


@dataclass
class RepairPlan:
    """Differences of one chunk and the writes that repair them.

    ``create``: ``Transaction`` rows to insert (column dicts); ``update``: {transaction id:
    columns to set}; ``resolution_create``: ``Resolution`` rows to insert, whose missing time is
    taken from ``op_timestamps`` ({Op commit log offset: store time}, read for
    ``op_timestamps_wanted``) or now; ``resolution_update``: {``Resolution`` id: columns}.
    """

    differences: list[Difference] = field(default_factory=list)
    create: list[dict[str, Any]] = field(default_factory=list)
    update: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolution_create: list[dict[str, Any]] = field(default_factory=list)
    resolution_update: dict[int, dict[str, Any]] = field(default_factory=dict)
    op_timestamps_wanted: set[int] = field(default_factory=set)
    op_timestamps: dict[int, int] = field(default_factory=dict)

    def diff(self, tid: str, name: str, stored: Any, derived: Any, repairable: bool = True) -> None:
        """Report one difference (values as the database spells them)."""
        self.differences.append(Difference(tid, name, plain(stored), plain(derived), repairable))

    def apply(self) -> int:
        """Write the repairs (inside the chunk's transaction); return differences repaired.
        A row made resolved or discarded without a known time gets now as its resolution time.
        """
        now = now_ms()
        self._rows_create(now)
        self._rows_update(now)
        self._resolutions_create(now)
        for pk, values in self.resolution_update.items():
            Resolution.objects.filter(pk=pk).update(**values)
        return sum(d.repairable for d in self.differences)

    def _rows_create(self, now: int) -> None:
        if not self.create:
            return
        for row in self.create:
            if row["state"] != TransactionState.PREPARED and row["resolved_timestamp"] is None:
                row["resolved_timestamp"] = now
        Transaction.objects.bulk_create([Transaction(**row) for row in self.create])

    def _rows_update(self, now: int) -> None:
        for tid, values in self.update.items():
            if values.get("state") not in (None, TransactionState.PREPARED):
                values["resolved_timestamp"] = values.get("resolved_timestamp") or now
            Transaction.objects.filter(pk=tid).update(**values)

    def _resolutions_create(self, now: int) -> None:
        if not self.resolution_create:
            return
        Resolution.objects.bulk_create(
            [
                Resolution(
                    **{
                        **row,
                        "resolved_timestamp": row["resolved_timestamp"]
                        or self.op_timestamps.get(row["op_commit_log_offset"])
                        or now,
                    }
                )
                for row in self.resolution_create
            ]
        )


def extra_row_delete(transaction_id: str) -> bool:
    """Delete the ``Transaction`` row ``transaction_id`` (and its queued check requests, by
    cascade) if it still has no half message and no ``Resolution``; True if it was deleted."""
    with transaction.atomic():
        deleted, _ = Transaction.objects.filter(
            ~Exists(Message.objects.filter(topic=HALF_TOPIC, msg_id=OuterRef("pk"))),
            pk=transaction_id,
            resolution__isnull=True,
        ).delete()
    return bool(deleted)

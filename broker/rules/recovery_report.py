"""What a rebuild reports: each ``Difference`` between the stored rows and the logs, and the
``RebuildReport`` of a whole run. Plain values; no database."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# Transaction fields compared with the logs. Scheduling (next_check_timestamp: only whether it
# is set; last_check_timestamp, undelivered_checks, check_immunity_ms, resolved_timestamp) is
# not state and is only rewritten where a row is created or its state repaired.
COMPARED_FIELDS = (
    "producer_group",
    "topic",
    "queue_id",
    "tags",
    "keys",
    "half_queue_id",
    "half_queue_offset",
    "half_commit_log_offset",
    "born_timestamp",
    "state",
    "check_times",
    "resolved_by",
    "queue_offset",
    "discard_reason",
)

# Difference.field values that are not Transaction columns.
MISSING = "missing"  # the logs have a transaction, no row does
EXTRA = "extra"  # a row for a transaction with no half message
RESOLUTION = "resolution"  # the Resolution journal row is missing
RESOLUTION_ACTION = "resolution.action"
RESOLUTION_OP_OFFSET = "resolution.op_commit_log_offset"
RESOLUTION_HALF_OFFSET = "resolution.half_queue_offset"  # not repaired
DELIVERED_MESSAGE = "delivered_message"  # COMMIT journalled, nothing delivered: not repaired


def plain(value: Any) -> Any:
    """Choices as their plain values, so reports print and serialise as the database has them."""
    return value.value if isinstance(value, Enum) else value


@dataclass
class Difference:
    """One way the stored rows differ from the logs.

    ``field`` is a ``Transaction`` column, or one of ``missing`` (no row for a transaction the
    logs have), ``extra`` (a row without a half message), ``resolution`` (no journal row for a
    resolved transaction), ``resolution.action``, ``resolution.op_commit_log_offset``,
    ``resolution.half_queue_offset`` or ``delivered_message``. ``stored`` is what the rows say,
    ``derived`` what the logs say (plain values, not enums). ``repairable`` is False for what
    the rebuild leaves to an operator (it is reported, and reported again by the next run).
    """

    transaction_id: str
    field: str
    stored: Any
    derived: Any
    repairable: bool = True


@dataclass
class RebuildReport:
    """The outcome of a rebuild: how much was read and every difference found."""

    half_messages: int = 0
    op_messages: int = 0
    transactions: int = 0
    differences: list[Difference] = field(default_factory=list)
    dry_run: bool = True
    applied: bool = False
    """True when repairs were written (not a dry run), even if there were none to write."""
    repaired: int = 0
    """Differences repaired (0 in a dry run)."""
    elapsed_ms: int = 0

    @property
    def unrepairable(self) -> list[Difference]:
        """The differences left to an operator."""
        return [d for d in self.differences if not d.repairable]

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (``manage.py rebuild_transactions --json``), with
        ``unrepairable``: how many differences an operator must look at."""
        return {**asdict(self), "unrepairable": len(self.unrepairable)}
